package apikey_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/apikey"
	"github.com/mcpbox/mcpbox/store/sqlite"
)

func TestKeys(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	secret, k, hash, err := apikey.Generate("team-a", "ci")
	if err != nil {
		t.Fatal(err)
	}
	// E2B SDKs before 2.46 refuse a key that does not match this.
	if !regexp.MustCompile(`^e2b_[0-9a-f]{64}$`).MatchString(secret) || strings.Contains(hash, secret) {
		t.Fatalf("secret %q, hash %q", secret, hash)
	}
	if err := st.PutKey(ctx, k, hash); err != nil {
		t.Fatal(err)
	}
	got, err := apikey.Authenticate(ctx, st, secret)
	if err != nil || got.Owner != "team-a" || got.Name != "ci" {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}
	for _, bad := range []string{"", secret + "x", apikey.Prefix + strings.Repeat("a", 64)} {
		if _, err := apikey.Authenticate(ctx, st, bad); mcpbox.ErrorCode(err) != mcpbox.EUNAUTH {
			t.Errorf("Authenticate(%q) = %v, want UNAUTHENTICATED", bad, err)
		}
	}
	if err := st.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Authenticate(ctx, st, secret); mcpbox.ErrorCode(err) != mcpbox.EUNAUTH {
		t.Errorf("revoked key authenticates: %v", err)
	}
	if err := st.RevokeKey(ctx, "nope"); mcpbox.ErrorCode(err) != mcpbox.ENOTFOUND {
		t.Errorf("RevokeKey(unknown) = %v", err)
	}
	list, err := st.ListKeys(ctx)
	if err != nil || len(list) != 1 || !list[0].Revoked || list[0].ID != k.ID {
		t.Errorf("ListKeys = %+v, %v", list, err)
	}
	for _, owner := range []string{"", "a b", strings.Repeat("x", 65), "../x"} {
		if _, _, _, err := apikey.Generate(owner, ""); mcpbox.ErrorCode(err) != mcpbox.EINVALID {
			t.Errorf("Generate(%q) = %v, want INVALID_ARGUMENT", owner, err)
		}
	}
}
