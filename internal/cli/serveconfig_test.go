package cli

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/config"
)

// Flags over the environment over the file over the defaults.
func TestServeFlagPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "syncgo.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:1\nmount: /file\ndb: file.db\nidle_timeout: 1m\ncheckpoints: [p/file]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		return map[string]string{"SYNCGO_LISTEN": "127.0.0.1:2", "SYNCGO_MOUNT": "/env"}[k]
	}
	cfg, err := config.Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	apply := bindServeFlags(fs)
	if err := fs.Parse([]string{"-listen", "127.0.0.1:3", "-dev", "-checkpoint", "p/a", "-checkpoint", "p/b"}); err != nil {
		t.Fatal(err)
	}
	apply(&cfg)
	if cfg.Listen != "127.0.0.1:3" || cfg.Mount != "/env" || cfg.DB != filepath.Join(filepath.Dir(path), "file.db") ||
		cfg.IdleTimeout != time.Minute || cfg.Auth.Mode != config.ModeDev || !slices.Equal(cfg.Checkpoints, []string{"p/a", "p/b"}) {
		t.Errorf("effective config %+v", cfg)
	}
	// Flags not given leave the file's and the environment's values.
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	apply = bindServeFlags(fs)
	_ = fs.Parse(nil)
	before := cfg
	apply(&cfg)
	if cfg.Listen != before.Listen || cfg.Mount != before.Mount || cfg.IdleTimeout != before.IdleTimeout {
		t.Errorf("unset flags changed the config: %+v", cfg)
	}
}
