package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpbox/mcpbox"
)

var _ mcpbox.KeyStore = (*Store)(nil)

// PutKey stores a new key with the hash of its secret.
func (s *Store) PutKey(ctx context.Context, k *mcpbox.APIKey, hash string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, owner, name, hash, created, revoked) VALUES (?, ?, ?, ?, ?, ?)`,
		k.ID, k.Owner, k.Name, hash, k.Created.UnixNano(), k.Revoked)
	if err != nil {
		return fmt.Errorf("store key %s: %w", k.ID, err)
	}
	return nil
}

// KeyByHash returns the live key whose secret hashes to hash.
func (s *Store) KeyByHash(ctx context.Context, hash string) (*mcpbox.APIKey, error) {
	row := s.db.QueryRowContext(ctx, `SELECT id, owner, name, created, revoked FROM api_keys WHERE hash = ?`, hash)
	k, err := scanKey(row)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && k.Revoked) {
		return nil, mcpbox.Errorf(mcpbox.EUNAUTH, "the API key is unknown or revoked")
	}
	return k, err
}

// ListKeys returns every key, oldest first.
func (s *Store) ListKeys(ctx context.Context) ([]*mcpbox.APIKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, owner, name, created, revoked FROM api_keys ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	var out []*mcpbox.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes a key by id.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked = 1 WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return mcpbox.Errorf(mcpbox.ENOTFOUND, "no API key %q", id).WithSuggestion("list the keys with `mcpbox key list`")
	}
	return nil
}

func scanKey(row interface{ Scan(...any) error }) (*mcpbox.APIKey, error) {
	var k mcpbox.APIKey
	var created int64
	if err := row.Scan(&k.ID, &k.Owner, &k.Name, &created, &k.Revoked); err != nil {
		return nil, err
	}
	k.Created = time.Unix(0, created).UTC()
	return &k, nil
}
