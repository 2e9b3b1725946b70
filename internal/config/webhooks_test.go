package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/schema"
)

func hookSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	sc, err := schema.New(1).Table("tasks", "id", schema.String("id"), schema.String("user_id"), schema.String("title")).Scope("user:{user_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// A hook's secret being rotated: previous_secrets (by ${ENV} too) or
// previous_secret_files (relative to the config file), read by Hooks,
// listed among the secrets output hides, and checked without a secret's
// value in any error.
func TestWebhookPreviousSecrets(t *testing.T) {
	const (
		newS   = "hook-new-secret-0123456789"
		oldS   = "hook-old-secret-0123456789"
		olderS = "hook-older-secret-0123456789"
	)
	path := writeFile(t, `
webhooks:
  - name: by-env
    url: https://hooks.example.com/a
    tables: [tasks]
    secret: ${NEW}
    previous_secrets: ["${OLD}"]
  - name: by-file
    url: https://hooks.example.com/b
    tables: [tasks]
    secret_file: new.secret
    previous_secret_files: [old.secret, older.secret]
`)
	dir := filepath.Dir(path)
	for f, v := range map[string]string{"new.secret": newS + "\n", "old.secret": oldS + "\n", "older.secret": olderS} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(path, env(map[string]string{"NEW": newS, "OLD": oldS}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Webhooks[1].PreviousSecretFiles; len(got) != 2 || got[0] != filepath.Join(dir, "old.secret") {
		t.Errorf("previous_secret_files %q: want them relative to the config file", got)
	}
	hooks, err := c.Hooks(hookSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	if h := hooks[0]; h.Secret != newS || !slices.Equal(h.PreviousSecrets, []string{oldS}) {
		t.Errorf("by-env: secret %q, previous %q", h.Secret, h.PreviousSecrets)
	}
	if h := hooks[1]; h.Secret != newS || !slices.Equal(h.PreviousSecrets, []string{oldS, olderS}) || h.SecretFile != "" || h.PreviousSecretFiles != nil {
		t.Errorf("by-file: secret %q, previous %q (files %q %q)", h.Secret, h.PreviousSecrets, h.SecretFile, h.PreviousSecretFiles)
	}
	if c.Webhooks[1].PreviousSecrets != nil {
		t.Errorf("Hooks changed the config's hook: %q", c.Webhooks[1].PreviousSecrets)
	}
	s := c.Secrets()
	for _, want := range []string{newS, oldS, olderS} {
		if !slices.Contains(s, want) {
			t.Errorf("secrets %d values lack one of the webhooks' secrets", len(s))
		}
	}

	// Refused: both forms, an unreadable file, a short one, previous
	// without a secret; never a secret's value in the message.
	for _, c := range []struct {
		yaml, want string
	}{
		{`secret: ` + newS + `
    previous_secrets: [` + oldS + `]
    previous_secret_files: [old.secret]`, "previous_secrets or previous_secret_files, not both"},
		{`secret: ` + newS + `
    previous_secret_files: [missing.secret]`, "previous_secret_files[0]"},
		{`secret: ` + newS + `
    previous_secrets: [short-old]`, "previous_secrets[0] has 9 bytes"},
		{`previous_secrets: [` + oldS + `]`, "need a secret"},
		{`secret: ` + newS + `
    previous_secrets: [` + newS + `]`, "is the secret itself"},
	} {
		p := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(p, []byte("webhooks:\n  - name: h\n    url: https://hooks.example.com/a\n    tables: [tasks]\n    "+c.yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(p, nil)
		if err == nil {
			_, err = cfg.Hooks(hookSchema(t))
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", c.yaml, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), newS) || strings.Contains(err.Error(), oldS) || strings.Contains(err.Error(), "short-old") {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
}
