// Package apikey makes and checks mcpbox API keys. A key is "e2b_"
// followed by 64 lowercase hex digits (256 random bits): the shape E2B's
// keys have, which E2B SDKs before 2.46 check before they send anything,
// so one key serves MCP and the E2B API alike. The store keeps only its
// SHA-256; keys of the older "mcpbox_" shape still authenticate.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/mcpbox/mcpbox"
)

// Prefix starts every key, so secret scanners and people can tell one.
const Prefix = "e2b_"

var ownerRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Generate makes a key for owner. The secret is returned once and never
// stored; k and hash are what the store keeps.
func Generate(owner, name string) (secret string, k *mcpbox.APIKey, hash string, err error) {
	if !ownerRE.MatchString(owner) {
		return "", nil, "", mcpbox.Errorf(mcpbox.EINVALID, "owner %q: use 1 to 64 letters, digits, '_', '.' or '-'", owner)
	}
	b := make([]byte, 32)
	rand.Read(b)
	body := hex.EncodeToString(b)
	secret = Prefix + body
	k = &mcpbox.APIKey{ID: body[:12], Owner: owner, Name: name, Created: time.Now().UTC()}
	return secret, k, Hash(secret), nil
}

// Hash is the stored form of a secret. A fast hash is enough: the secret
// has 256 random bits, so there is nothing to guess that a slow hash
// would protect, and every request is checked.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the live key behind secret, or an EUNAUTH error.
func Authenticate(ctx context.Context, ks mcpbox.KeyStore, secret string) (*mcpbox.APIKey, error) {
	if secret == "" {
		return nil, mcpbox.Errorf(mcpbox.EUNAUTH, "no API key")
	}
	if ks == nil {
		return nil, mcpbox.Errorf(mcpbox.EUNAUTH, "this server has no API keys")
	}
	return ks.KeyByHash(ctx, Hash(secret))
}

// Presence tells whether a key store holds any live key, asking the store
// at most once a second, so a key made or revoked by another process takes
// effect without a restart while a busy server does not list keys on every
// request. The zero value is ready to use.
type Presence struct {
	mu      sync.Mutex
	checked time.Time
	exist   bool
}

// Any reports whether ks holds a live key; false for a nil store, true
// when the store cannot be read (fail closed).
func (p *Presence) Any(ctx context.Context, ks mcpbox.KeyStore) bool {
	if ks == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < time.Second {
		return p.exist
	}
	keys, err := ks.ListKeys(ctx)
	if err != nil {
		return true
	}
	p.exist = slices.ContainsFunc(keys, func(k *mcpbox.APIKey) bool { return !k.Revoked })
	p.checked = time.Now()
	return p.exist
}
