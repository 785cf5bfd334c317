// Package sqlite is the mcpbox.Store on an embedded SQLite database
// (modernc.org/sqlite, pure Go: no cgo, nothing to install). Session
// records live in $MCPBOX_HOME/mcpbox.db and outlive the mcpbox process.
//
// Migrations are the numbered .sql files in migrations/, embedded in the
// binary and applied in order at Open; PRAGMA user_version records how far
// a database has come.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/mcpbox/mcpbox"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a SQLite-backed mcpbox.Store. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

var _ mcpbox.Store = (*Store)(nil)

// Open opens (creating if needed) the database at file and migrates it.
// The file and its WAL are private to their owner (0600): records hold
// session env values, the keys' hashes and the leases.
func Open(file string) (*Store, error) {
	if err := private(file); err != nil {
		return nil, err
	}
	dsn := "file:" + file + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	// One connection: SQLite serialises writers anyway, and one connection
	// never meets SQLITE_BUSY from itself. Other processes wait on the
	// busy timeout.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, now: time.Now}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", file, err)
	}
	for _, f := range []string{file + "-wal", file + "-shm"} {
		if err := os.Chmod(f, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			db.Close()
			return nil, fmt.Errorf("chmod %s: %w", f, err)
		}
	}
	return s, nil
}

// private creates file 0600 if it is missing, and takes group and other
// access away from one an older mcpbox made 0644. SQLite gives its -wal
// and -shm files the database file's mode.
func private(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", file, err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("chmod %s: %w", file, err)
	}
	return nil
}

// migrate applies the migrations this database lacks, in one immediate
// transaction: two processes opening a new home at once take turns, and
// the second finds nothing left to do.
func (s *Store) migrate() error {
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	var version int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	names, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name() < names[j].Name() })
	if version > len(names) {
		return fmt.Errorf("database is at version %d, newer than this mcpbox knows (%d): upgrade mcpbox", version, len(names))
	}
	for i := version; i < len(names); i++ {
		b, err := migrations.ReadFile(path.Join("migrations", names[i].Name()))
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, string(b)); err != nil {
			return fmt.Errorf("%s: %w", names[i].Name(), err)
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(names))); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	done = err == nil
	return err
}

// liveStates is mcpbox.LiveStates as an SQL list.
var liveStates = func() string {
	var q []string
	for _, st := range mcpbox.LiveStates {
		q = append(q, "'"+string(st)+"'")
	}
	return "(" + strings.Join(q, ", ") + ")"
}()

// admission is the SQL condition that lim holds for a live record of
// owner with id, not counting the record id itself, and its arguments.
func admission(lim mcpbox.Admission, id, owner string) (string, []any) {
	var conds []string
	var args []any
	if lim.MaxTotal > 0 {
		conds = append(conds, `(SELECT count(*) FROM sessions WHERE state IN `+liveStates+` AND id != ?) < ?`)
		args = append(args, id, lim.MaxTotal)
	}
	if lim.MaxPerOwner > 0 && owner != "" {
		conds = append(conds, `(SELECT count(*) FROM sessions WHERE state IN `+liveStates+` AND owner = ? AND id != ?) < ?`)
		args = append(args, owner, id, lim.MaxPerOwner)
	}
	if len(conds) == 0 {
		return "1", nil
	}
	return strings.Join(conds, " AND "), args
}

// refused explains, after a write that admission stopped, which limit it
// was (counted again: the figures may have moved since, not the verdict).
func (s *Store) refused(ctx context.Context, lim mcpbox.Admission, id, owner string) error {
	var total, ofOwner int
	s.db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE state IN `+liveStates+` AND id != ?`, id).Scan(&total)
	s.db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE state IN `+liveStates+` AND owner = ? AND id != ?`, owner, id).Scan(&ofOwner)
	if err := mcpbox.CheckAdmission(lim, owner, total, ofOwner); err != nil {
		return err
	}
	// Room was made in between; report the limit all the same, and the
	// caller may retry.
	return mcpbox.CheckAdmission(lim, owner, max(total, lim.MaxTotal), max(ofOwner, lim.MaxPerOwner))
}

// CreateSession inserts a new record, checking lim in the same statement.
func (s *Store) CreateSession(ctx context.Context, sess *mcpbox.Session, lim mcpbox.Admission) error {
	next := *sess
	next.Revision = 1
	b, err := json.Marshal(&next)
	if err != nil {
		return err
	}
	cond, cargs := "1", []any(nil)
	if sess.State.Live() {
		cond, cargs = admission(lim, sess.ID, sess.Owner)
	}
	args := append([]any{sess.ID, sess.Owner, string(sess.State), sess.Created.UnixNano(), string(b)}, cargs...)
	res, err := s.db.ExecContext(ctx, `INSERT INTO sessions (id, owner, state, created, data, revision)
		SELECT ?, ?, ?, ?, ?, 1 WHERE `+cond, args...)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return mcpbox.Errorf(mcpbox.ECONFLICT, "session %q already exists", sess.ID)
		}
		return fmt.Errorf("store session %s: %w", sess.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return s.refused(ctx, lim, sess.ID, sess.Owner)
	}
	sess.Revision = 1
	return nil
}

// UpdateSession replaces a record whose revision is unchanged.
func (s *Store) UpdateSession(ctx context.Context, sess *mcpbox.Session, lim *mcpbox.Admission) error {
	next := *sess
	next.Revision = sess.Revision + 1
	b, err := json.Marshal(&next)
	if err != nil {
		return err
	}
	cond, cargs := "1", []any(nil)
	if lim != nil && sess.State.Live() {
		cond, cargs = admission(*lim, sess.ID, sess.Owner)
	}
	args := append([]any{sess.Owner, string(sess.State), string(b), sess.ID, sess.Revision}, cargs...)
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET owner = ?, state = ?, data = ?, revision = revision + 1
		WHERE id = ? AND revision = ? AND `+cond, args...)
	if err != nil {
		return fmt.Errorf("store session %s: %w", sess.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		sess.Revision = next.Revision
		return nil
	}
	var rev int64
	err = s.db.QueryRowContext(ctx, `SELECT revision FROM sessions WHERE id = ?`, sess.ID).Scan(&rev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return mcpbox.SessionNotFound(sess.ID)
	case err != nil:
		return fmt.Errorf("store session %s: %w", sess.ID, err)
	case rev != sess.Revision:
		return mcpbox.Conflict(sess.ID, sess.Revision, rev)
	}
	return s.refused(ctx, *lim, sess.ID, sess.Owner)
}

// GetSession returns a record.
func (s *Store) GetSession(ctx context.Context, id string) (*mcpbox.Session, error) {
	var data string
	var rev int64
	err := s.db.QueryRowContext(ctx, `SELECT data, revision FROM sessions WHERE id = ?`, id).Scan(&data, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, mcpbox.SessionNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("load session %s: %w", id, err)
	}
	var sess mcpbox.Session
	if err := json.Unmarshal([]byte(data), &sess); err != nil {
		return nil, fmt.Errorf("load session %s: %w", id, err)
	}
	sess.Revision = rev
	return &sess, nil
}

// ListSessions returns the records f matches, oldest first. Owner and
// state are filtered in SQL, metadata in Go.
func (s *Store) ListSessions(ctx context.Context, f mcpbox.SessionFilter) ([]*mcpbox.Session, error) {
	q := `SELECT data, revision FROM sessions`
	var where []string
	var args []any
	if f.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, f.Owner)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created, id"
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []*mcpbox.Session
	for rows.Next() {
		var data string
		var rev int64
		if err := rows.Scan(&data, &rev); err != nil {
			return nil, err
		}
		var sess mcpbox.Session
		if err := json.Unmarshal([]byte(data), &sess); err != nil {
			return nil, err
		}
		sess.Revision = rev
		if f.Match(&sess) {
			out = append(out, &sess)
		}
	}
	return out, rows.Err()
}

// DeleteSession removes a record.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// AcquireLease takes or renews a lease in one statement: it writes only
// when the lease is free, expired or already holder's.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	now := s.now()
	res, err := s.db.ExecContext(ctx, `INSERT INTO leases (name, holder, expires) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
		WHERE leases.holder = excluded.holder OR leases.expires <= ?`,
		name, holder, now.Add(ttl).UnixNano(), now.UnixNano())
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ReleaseLease gives up holder's lease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// Lease returns a lease's holder and expiry.
func (s *Store) Lease(ctx context.Context, name string) (string, time.Time, error) {
	var holder string
	var exp int64
	err := s.db.QueryRowContext(ctx, `SELECT holder, expires FROM leases WHERE name = ?`, name).Scan(&holder, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("lease %s: %w", name, err)
	}
	return holder, time.Unix(0, exp), nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }
