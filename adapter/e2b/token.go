package e2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// A sandbox's access token (envdAccessToken in E2B's API) is
//
//	base64url(owner) "." base64url(HMAC-SHA256(secret, "e2b-access\x00" owner "\x00" id))
//
// so it names the owner it was issued to and binds them to one sandbox. It
// is derived, not stored: every process sharing the secret checks it, and
// sessions made through MCP have one too (Sandbox.connect hands it out).
// The owner it names is who the door is opened for, so a token cannot
// reach another owner's sandbox, nor another sandbox of the same owner.

var b64 = base64.RawURLEncoding

func (h *Handler) mac(owner, id string) []byte {
	m := hmac.New(sha256.New, h.opts.Secret)
	m.Write([]byte("e2b-access\x00" + owner + "\x00" + id))
	return m.Sum(nil)
}

// AccessToken returns the access token of owner's sandbox id.
func (h *Handler) AccessToken(owner, id string) string {
	return b64.EncodeToString([]byte(owner)) + "." + b64.EncodeToString(h.mac(owner, id))
}

// checkToken returns the owner a token for sandbox id was issued to, or
// false when it was not issued for id by this secret. The comparison is
// constant-time.
func (h *Handler) checkToken(token, id string) (string, bool) {
	o, m, ok := strings.Cut(token, ".")
	if !ok || len(token) > 512 {
		return "", false
	}
	owner, err1 := b64.DecodeString(o)
	sum, err2 := b64.DecodeString(m)
	if err1 != nil || err2 != nil {
		return "", false
	}
	if !hmac.Equal(sum, h.mac(string(owner), id)) {
		return "", false
	}
	return string(owner), true
}

// LoadSecret reads the token secret at path, creating it (32 random bytes,
// mode 0600) when it does not exist. Processes sharing a home share it.
func LoadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	// Empty for a moment while another process writes it.
	for i := 0; err == nil && len(b) == 0 && i < 50; i++ {
		time.Sleep(10 * time.Millisecond)
		b, err = os.ReadFile(path)
	}
	if err == nil {
		if len(b) < 16 {
			return nil, fmt.Errorf("e2b: %s holds %d bytes, not a secret: remove it and a new one is made", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("e2b: read token secret: %w", err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process made it first: theirs is the one.
		return LoadSecret(path)
	}
	if err != nil {
		return nil, fmt.Errorf("e2b: create token secret: %w", err)
	}
	// Written in one call: a reader sees all or (briefly) nothing, and an
	// empty file is refused above, never used.
	if _, err := f.Write(secret); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("e2b: write token secret: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("e2b: write token secret: %w", err)
	}
	return secret, nil
}
