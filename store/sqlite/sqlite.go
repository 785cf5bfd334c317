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
	"path"
	"sort"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/mcpbox/mcpbox"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a SQLite-backed mcpbox.Store. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

var _ mcpbox.Store = (*Store)(nil)

// Open opens (creating if needed) the database at file and migrates it.
func Open(file string) (*Store, error) {
	dsn := "file:" + file + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	// One connection: SQLite serialises writers anyway, and one connection
	// never meets SQLITE_BUSY from itself.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", file, err)
	}
	return s, nil
}

func (s *Store) migrate() error {
	var version int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
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
		tx, err := s.db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(string(b)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: %w", names[i].Name(), err)
		}
		if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// PutSession creates or replaces a record.
func (s *Store) PutSession(ctx context.Context, sess *mcpbox.Session) error {
	b, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO sessions (id, owner, state, created, data) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, state = excluded.state, created = excluded.created, data = excluded.data`,
		sess.ID, sess.Owner, string(sess.State), sess.Created.UnixNano(), string(b))
	if err != nil {
		return fmt.Errorf("store session %s: %w", sess.ID, err)
	}
	return nil
}

// GetSession returns a record.
func (s *Store) GetSession(ctx context.Context, id string) (*mcpbox.Session, error) {
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM sessions WHERE id = ?`, id).Scan(&data)
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
	return &sess, nil
}

// ListSessions returns the records f matches, oldest first. Owner and
// state are filtered in SQL, metadata in Go.
func (s *Store) ListSessions(ctx context.Context, f mcpbox.SessionFilter) ([]*mcpbox.Session, error) {
	q := `SELECT data FROM sessions`
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
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var sess mcpbox.Session
		if err := json.Unmarshal([]byte(data), &sess); err != nil {
			return nil, err
		}
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

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }
