package mcpbox

import (
	"context"
	"time"
)

// APIKey is a credential for the HTTP adapters. Each key belongs to one
// owner; whoever presents it acts as that owner. Only a hash of the secret
// is ever stored, so a leaked database leaks no usable key.
type APIKey struct {
	// ID is the key's public name (the secret's first characters), shown
	// by `mcpbox key list` and used to revoke it.
	ID      string    `json:"id"`
	Owner   string    `json:"owner"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created"`
	// Revoked keys stay listed but no longer authenticate.
	Revoked bool `json:"revoked,omitempty"`
}

// KeyStore keeps API keys by the hash of their secret.
type KeyStore interface {
	// PutKey stores a new key with the hash of its secret.
	PutKey(ctx context.Context, k *APIKey, hash string) error
	// KeyByHash returns the live key whose secret hashes to hash, or an
	// Error with code EUNAUTH when there is none or it was revoked.
	KeyByHash(ctx context.Context, hash string) (*APIKey, error)
	// ListKeys returns every key, revoked ones too, oldest first.
	ListKeys(ctx context.Context) ([]*APIKey, error)
	// RevokeKey revokes a key by ID, or returns an Error with code
	// ENOTFOUND.
	RevokeKey(ctx context.Context, id string) error
}
