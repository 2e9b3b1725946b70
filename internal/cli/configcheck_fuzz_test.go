package cli

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/sqlitestore"
)

// A file that config check passes also starts serve: serve's own checks
// (the listener's address against the authentication, the plan, the
// server configuration and syncgo.New) accept what check accepted. Only
// what check leaves to the environment is left out: an object store it
// does not contact, a JWKS it does not fetch, a listen address this host
// cannot bind.
func FuzzConfigCheckServes(f *testing.F) {
	for _, s := range []string{
		"listen: 127.0.0.1:8787\n",
		"listen: 0.0.0.0:8787\n",
		"listen: ':8787'\n",
		"listen: 0.0.0.0:8787\nauth:\n  mode: dev\n",
		"listen: 0.0.0.0:8787\nauth:\n  hs256_secret: 0123456789abcdef0123456789abcdef\n  audience: [a]\nscopes:\n  project_id:\n    - claim: projects\n",
		"cors:\n  allowed_origins: ['https://*.example.com']\n  max_age: 1m\nlog:\n  format: JSON\n  level: debug\n",
		"mount: /api/sync\nlimits:\n  max_request_bytes: 1024\n  rate_per_actor: 2\nrealtime:\n  max_sockets: 4\n",
		"blobs:\n  store: fs:blobs\n  max_bytes: 10\nsegments:\n  forget_after: 1h\n",
		"tracing:\n  endpoint: http://127.0.0.1:4318\n  sample_ratio: 0.5\n",
		"checkpoints: [p/one]\nretention:\n  interval: -1s\n",
		"webhooks:\n  - name: task-events\n    url: https://hooks.example.com/x\n    tables: [tasks]\n    ops: [insert, delete]\n" +
			"    secret: 0123456789abcdef0123\n    timeout: 3s\n    max_attempts: 4\n",
		"webhooks:\n  - name: task-events\n    url: https://hooks.example.com/x\n    tables: [tasks]\n" +
			"    secret: 0123456789abcdef0123\n    previous_secrets: [fedcba9876543210fedc, old-0123456789abcdef]\n",
		"validators:\n  - table: tasks\n    rule: {kind: maxLength, column: title, max: 200, code: app.title_too_long}\n" +
			"  - table: tasks\n    rule: {kind: immutableWhen, column: title, guard_column: done, guard_value: true, code: app.task_closed}\n",
		"operations:\n  max_watches: 4\n  queries:\n    - id: openTasks\n" +
			"      sql: \"SELECT id, title FROM tasks WHERE project_id = :project AND done = false ORDER BY id\"\n" +
			"      params:\n        - {name: project, type: string}\n      columns:\n        - {name: id, type: string}\n        - {name: title, type: string}\n" +
			"      coverage:\n        - table: tasks\n          scopes: {project_id: [\":project\"]}\n      max_rows: 500\n",
		"signed_urls:\n  public_url: https://sync.example.com/api\n  ttl: 5m\ncors:\n  allowed_origins: ['*']\n  allowed_methods: [get, post]\n",
	} {
		f.Add([]byte(s))
	}
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(f.TempDir(), "fuzz.db"),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	getenv := func(name string) string {
		if name == "X" {
			return "y"
		}
		return ""
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "syncgo.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, getenv)
		if err != nil {
			return
		}
		if host, _, err := net.SplitHostPort(cfg.Listen); err == nil && host != "" && host != "localhost" && net.ParseIP(host) == nil {
			return // a host name: check and serve would ask the resolver, too slow for a fuzz target
		}
		if _, _, err := checkConfig(cfg); err != nil {
			return
		}
		if cfg.Blobs.IsS3() || strings.HasPrefix(cfg.Segments.Store, "s3://") || cfg.Auth.JWKSURL != "" {
			return // check does not contact these; serve does
		}
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			t.Fatalf("config check passed listen %q, which serve cannot listen on: %v", cfg.Listen, err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return // an address of another host, or a name this host does not resolve
		}
		defer ln.Close()
		addr, ok := ln.Addr().(*net.TCPAddr)
		mode, err := cfg.AuthMode(ok && addr.IP.IsLoopback())
		if err != nil {
			t.Fatalf("config check passed, serve refuses to listen on %s: %v", cfg.Listen, err)
		}
		logger, err := newLogger(cfg.Log, io.Discard)
		if err != nil {
			t.Fatalf("config check passed, serve's logger: %v", err)
		}
		tp, err := newTracerProvider(context.Background(), cfg.Tracing, getenv)
		if err != nil {
			t.Fatalf("config check passed, serve's tracing: %v", err)
		}
		if tp != nil {
			defer func() { _ = shutdownTracing(tp) }()
		}
		plan, err := planServe(cfg, mode, addr.IP.IsLoopback(), ln.Addr(), logger)
		if err != nil {
			t.Fatalf("config check passed, serve's plan: %v", err)
		}
		defer plan.close()
		obs := observability{cfg: cfg, log: logger}
		scfg, err := plan.serverConfig(cfg, st, &obs, logger, ln.Addr(), logger)
		if err != nil {
			t.Fatalf("config check passed, serve's server configuration: %v", err)
		}
		if _, err := syncgo.New(scfg); err != nil {
			t.Fatalf("config check passed, syncgo.New: %v", err)
		}
	})
}

// Without authentication configured, config check refuses a listen
// address other hosts reach, as serve does, and accepts a loopback one or
// the development mode acknowledged.
func TestCheckConfigDevAuthListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen, mode string
		ok           bool
	}{
		{"127.0.0.1:8787", "", true},
		{"localhost:8787", "", true},
		{"[::1]:8787", "", true},
		{"0.0.0.0:8787", "", false},
		{":8787", "", false},
		{"0.0.0.0:8787", config.ModeDev, true},
	} {
		cfg := config.Default()
		cfg.Listen, cfg.Auth.Mode = tc.listen, tc.mode
		_, _, err := checkConfig(cfg)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "loopback")) {
			t.Errorf("listen %s, auth.mode %q: config check %v; want ok %t (a refusal names loopback)", tc.listen, tc.mode, err, tc.ok)
		}
	}
}
