package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/config"
)

// config check refuses the segment, blob and signed URL settings serve
// refuses at start (docs/configuration.md: "the secret and key files"),
// reading the signing keys as serve does, instead of answering OK.
func TestCheckConfigStorage(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "url.key")
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := config.Default()
	base.DB = filepath.Join(dir, "x.db")
	base.Auth.Mode = config.ModeDev
	for _, c := range []struct {
		name string
		set  func(*config.Config)
		want string
	}{
		{"unknown blob store", func(c *config.Config) { c.Blobs.Store = "bogus" }, "blobs.store"},
		{"missing key file", func(c *config.Config) { c.SignedURLs.KeyFile = filepath.Join(dir, "nowhere.key") }, "signed_urls.key_file"},
		{"short key", func(c *config.Config) { c.SignedURLs.KeyFile = short }, "at least 16"},
		{"missing previous key file", func(c *config.Config) {
			c.SignedURLs.KeyFile, c.SignedURLs.PreviousKeyFile = key, filepath.Join(dir, "old.key")
			c.SignedURLs.PreviousKeyUntil = "2026-12-07T00:00:00Z"
		}, "signed_urls.previous_key_file"},
		{"presign without a key", func(c *config.Config) { c.Blobs.Presign = true }, "blobs.presign"},
	} {
		cfg := base
		c.set(&cfg)
		if _, _, err := checkConfig(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: checkConfig = %v, want an error naming %s", c.name, err, c.want)
		}
	}
	cfg := base
	cfg.SignedURLs.KeyFile, cfg.Blobs.Presign = key, true
	if _, _, err := checkConfig(cfg); err != nil {
		t.Errorf("valid signing key: %v", err)
	}
}

// A mount the HTTP mux cannot route is refused at start with a message
// naming it (serve panicked registering the route), and by config check.
func TestServeRefusesBadMount(t *testing.T) {
	for _, mount := range []string{"/a{b", "/api v2"} {
		var stdout, stderr syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := Run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "x.db"), "-mount", mount}, nil, &stdout, &stderr)
		cancel()
		if code != 1 || !strings.Contains(stderr.String(), "mount") || stdout.String() != "" {
			t.Errorf("serve -mount %q: exit %d, stdout %q, stderr %q; want exit 1 and a refusal naming mount", mount, code, stdout.String(), stderr.String())
		}
		cfg := config.Default()
		cfg.Mount = mount
		if _, _, err := checkConfig(cfg); err == nil || !strings.Contains(err.Error(), "mount") {
			t.Errorf("config check with mount %q: %v, want a refusal naming mount", mount, err)
		}
	}
}
