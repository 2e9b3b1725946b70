package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/webhook"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncgo.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Environment over file over defaults (flags are applied over Load's
// result by the command line: internal/cli tests them).
func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
listen: 0.0.0.0:9000
db: data/sync.db
mount: /api
idle_timeout: 5m
schema: schema.json
checkpoints: [p/a]
limits: {max_request_bytes: 1000, queue_timeout: 2s}
realtime: {release_after_churn: 50, max_delta_bytes: 4096}
auth:
  issuer: https://file.test
  audience: [a, b]
  hs256_secret_file: secret.txt
  public_keys:
    - pem_file: keys/k.pem
`)
	dir := filepath.Dir(path)
	c, err := Load(path, env(map[string]string{
		"SYNCGO_MOUNT":                        "/env",
		"SYNCGO_AUTH_ISSUER":                  "https://env.test",
		"SYNCGO_AUTH_AUDIENCE":                "x, y",
		"SYNCGO_LIMITS_MAX_FRAME_BYTES":       "77",
		"SYNCGO_REALTIME_HEARTBEAT":           "7s",
		"SYNCGO_MAX_CONNS":                    "12",
		"SYNCGO_REALTIME_RELEASE_AFTER_CHURN": "-1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen = "0.0.0.0:9000"
	want.DB = filepath.Join(dir, "data/sync.db")
	want.Mount = "/env"
	want.IdleTimeout = 5 * time.Minute
	want.Schema = filepath.Join(dir, "schema.json")
	want.Checkpoints = []string{"p/a"}
	want.MaxConns = 12
	want.Limits.MaxRequestBytes = 1000
	want.Limits.MaxFrameBytes = 77
	want.Limits.QueueTimeout = 2 * time.Second
	want.Realtime.Heartbeat = 7 * time.Second
	want.Realtime.MaxDeltaBytes = 4096
	want.Realtime.ReleaseAfterChurn = -1
	want.Auth.Issuer = "https://env.test"
	want.Auth.Audience = []string{"x", "y"}
	want.Auth.HS256SecretFile = filepath.Join(dir, "secret.txt")
	want.Auth.PublicKeys = c.Auth.PublicKeys
	if got := c.Auth.PublicKeys[0].PEMFile; got != filepath.Join(dir, "keys/k.pem") {
		t.Errorf("pem_file %q, want it relative to the file", got)
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	// No file: defaults, then the environment.
	c, err = Load("", env(map[string]string{"SYNCGO_DB": "postgres://h/db", "SYNCGO_AUTH_MODE": "dev"}))
	if err != nil || c.DB != "postgres://h/db" || c.Listen != Default().Listen || c.Auth.Mode != ModeDev {
		t.Errorf("env only: %+v %v", c, err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"listn: x\n", "field listn not found"},
		{"auth:\n  jwks: x\n", "field jwks not found"},
		{"limits:\n  stall_timeout: soon\n", "line 2: cannot unmarshal !!str `soon` into time.Duration"},
		{"scopes:\n  list_id:\n    - claim: a\n      vlaue: b\n", "field vlaue not found"},
		{"cors:\n  allowed_origin: [x]\n", "field allowed_origin not found"},
		{"db: ${NOPE_UNSET}\n", "NOPE_UNSET is not set"},
		{"db: a${b\n", "write $${"},
		{"listen: a\n---\nlisten: b\n", "more than one YAML document"},
		{"- a\n", "cannot unmarshal"},
	} {
		_, err := Load(writeFile(t, c.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error containing %q", c.body, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), env(nil)); err == nil {
		t.Error("a missing file loaded")
	}
	if _, err := Load("", env(map[string]string{"SYNCGO_MAX_CONNS": "many"})); err == nil || !strings.Contains(err.Error(), "SYNCGO_MAX_CONNS") {
		t.Errorf("bad env int: %v", err)
	}
	if _, err := Load("", env(map[string]string{"SYNCGO_SCOPES": "x"})); err == nil || !strings.Contains(err.Error(), "use the config file") {
		t.Errorf("a map setting from the environment: %v, want a refusal", err)
	}
}

// ${NAME} is expanded in every string of the file, nested ones included;
// $${ is a literal; the environment's own values are not expanded again.
func TestExpand(t *testing.T) {
	c, err := Load(writeFile(t, `
db: postgres://u:${PW}@h/db
auth:
  hs256_secret: ${SECRET}
  token_sources: [{cookie: "${COOKIE}"}]
scopes:
  list_id:
    - value: "$${literal}"
`), env(map[string]string{"PW": "p@ss", "SECRET": "s3", "COOKIE": "ck", "SYNCGO_LISTEN": "${PW}"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DB != "postgres://u:p@ss@h/db" || c.Auth.HS256Secret != "s3" || c.Auth.TokenSources[0].Cookie != "ck" ||
		c.Scopes["list_id"][0].Value != "${literal}" || c.Listen != "${PW}" {
		t.Errorf("expanded: %+v", c)
	}
}

func TestAuthMode(t *testing.T) {
	var c Config
	if m, err := c.AuthMode(true); m != ModeDev || err != nil {
		t.Errorf("nothing configured, loopback: %q %v", m, err)
	}
	if _, err := c.AuthMode(false); err == nil || !strings.Contains(err.Error(), "-dev") {
		t.Errorf("nothing configured, public: %v", err)
	}
	c.Auth.JWKSURL = "https://x/jwks"
	if m, _ := c.AuthMode(false); m != ModeJWT {
		t.Errorf("a key configured: %q", m)
	}
	c.Auth.Mode = ModeDev
	if m, _ := c.AuthMode(false); m != ModeDev {
		t.Errorf("explicit dev: %q", m)
	}
	c = Default()
	c.Auth.Mode = ModeJWT
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "no verification key") {
		t.Errorf("jwt without key: %v", err)
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.DBListen = "postgres://h/db"
	c.DBPasswordFile = "pw"
	c.Checkpoints = []string{"nopart"}
	c.MaxConns = -1
	err := c.Validate()
	for _, want := range []string{"db_listen is set but db is not Postgres", "db_password_file", "checkpoint", "max_conns"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want %q", err, want)
		}
	}
}

func TestDSN(t *testing.T) {
	for _, c := range []struct {
		db, redacted, password string
		pg                     bool
	}{
		{"syncgo.db", "syncgo.db", "", false},
		{"/var/lib/x=y.db", "/var/lib/x=y.db", "", false},
		{"postgres://u:secret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable", "secret", true},
		{"postgresql://u@h/db?password=secret", "postgresql://u@h/db?password=xxxxx", "secret", true},
		{"postgres://h/db", "postgres://h/db", "", true},
		{"host=h dbname=d password=secret user=u", "host=h dbname=d password=xxxxx user=u", "secret", true},
		{"dbname=d password = 'se cr\\'et' host=h", "dbname=d password = xxxxx host=h", "se cr'et", true},
		{"  host=/tmp dbname=d", "  host=/tmp dbname=d", "", true},
		{"dbname=d password='unterminated value", "dbname=d password=xxxxx", "unterminated value", true},
	} {
		if got := IsPostgres(c.db); got != c.pg {
			t.Errorf("IsPostgres(%q) = %v", c.db, got)
		}
		if got := RedactDSN(c.db); got != c.redacted {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.db, got, c.redacted)
		}
		if got := DSNPassword(c.db); got != c.password {
			t.Errorf("DSNPassword(%q) = %q, want %q", c.db, got, c.password)
		}
	}
	for _, c := range []struct{ db, pw, want string }{
		{"postgres://u@h/db", "p'w", "postgres://u:p%27w@h/db"},
		{"host=h dbname=d", `p'w\`, `host=h dbname=d password='p\'w\\'`},
		{"postgres://u:old@h/db", "new", "postgres://u:old@h/db"},
	} {
		got, err := WithPassword(c.db, c.pw)
		if err != nil || got != c.want {
			t.Errorf("WithPassword(%q) = %q %v, want %q", c.db, got, err, c.want)
		}
		if DSNPassword(got) == "" {
			t.Errorf("WithPassword(%q): no password read back", c.db)
		}
	}
}

func TestRedactingWriter(t *testing.T) {
	var b strings.Builder
	w := NewRedactingWriter(&b, []string{"hunter22", "s3cr3t"})
	n, err := w.Write([]byte("login hunter22 and s3cr3t\n"))
	if err != nil || n != len("login hunter22 and s3cr3t\n") || b.String() != "login xxxxx and xxxxx\n" {
		t.Errorf("wrote %d %v: %q", n, err, b.String())
	}
	c := Default()
	c.DB = "postgres://u:dbpass@h/db"
	c.Auth.HS256Secret = "jwt-secret"
	if s := c.Secrets(); len(s) != 2 || s[0] != "dbpass" || s[1] != "jwt-secret" {
		t.Errorf("secrets %q", s)
	}
	file := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(file, []byte("hook-file-secret-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Webhooks = []webhook.Hook{{Name: "a", Secret: "hook-secret-0123456"}, {Name: "b", SecretFile: file,
		Headers: map[string]string{"Authorization": "Bearer hook-token"}}}
	if s := c.Secrets(); !slices.Contains(s, "hook-secret-0123456") || !slices.Contains(s, "hook-file-secret-0123") || !slices.Contains(s, "Bearer hook-token") {
		t.Errorf("secrets with webhooks %q", s)
	}
	// The object store's key and the passwords of URLs' user info.
	s3file := filepath.Join(t.TempDir(), "s3.secret")
	if err := os.WriteFile(s3file, []byte("s3-file-secret-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Blobs.S3.SecretAccessKey = "s3-secret-key"
	c.Blobs.S3.SecretAccessKeyFile = s3file
	c.Auth.JWKSURL = "https://svc:jwks-pass@idp.example.com/jwks.json"
	c.Blobs.S3.Endpoint = "https://AKIA:endpoint-pass@s3.example.com"
	c.SignedURLs.PublicURL = "https://u:public-pass@sync.example.com"
	c.Tracing.Endpoint = "https://u:otlp-pass@otel.example.com/v1/traces"
	s := c.Secrets()
	for _, want := range []string{"s3-secret-key", "s3-file-secret-key", "jwks-pass", "endpoint-pass", "public-pass", "otlp-pass"} {
		if !slices.Contains(s, want) {
			t.Errorf("secrets %q lack %q", s, want)
		}
	}
}

// The password never survives redaction: whatever the DSN, what
// RedactDSN returns carries no password but xxxxx.
func FuzzRedactDSN(f *testing.F) {
	for _, s := range []string{"postgres://u:p@h/db", "host=h password='a b' dbname=d", "postgresql://h/db?password=x",
		"password=x", "dbname=d password='unterminated"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, db string) {
		r := RedactDSN(db)
		if p := DSNPassword(r); p != "" && p != redacted {
			t.Fatalf("RedactDSN(%q) = %q still carries password %q", db, r, p)
		}
		if RedactDSN(r) != r {
			t.Fatalf("RedactDSN is not idempotent on %q", db)
		}
	})
}

// Any file either loads or fails with an error, never a panic; a file
// that validates has an auth mode on a loopback address, and its log
// settings make a level (what serve builds first). The whole path from a
// file that config check passes to the server serve builds is
// FuzzConfigCheckServes (internal/cli).
func FuzzLoad(f *testing.F) {
	f.Add([]byte("listen: x\nauth:\n  audience: [a]\nscopes:\n  v:\n    - claim: c\n"))
	f.Add([]byte("db: ${X}\n"))
	f.Add([]byte("auth:\n  mode: jwt\nlog:\n  level: DEBUG+2\n  format: Json\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Default()
		if err := decode(data, &c); err != nil {
			return
		}
		if err := expand(reflect.ValueOf(&c).Elem(), "", env(map[string]string{"X": "y"})); err != nil {
			return
		}
		if c.Validate() != nil {
			return
		}
		if _, err := c.AuthMode(true); err != nil {
			t.Fatalf("a valid config has no auth mode on loopback: %v", err)
		}
		if _, err := c.Log.SlogLevel(); err != nil {
			t.Fatalf("a valid config's log level: %v", err)
		}
	})
}

func TestMaxCRDTBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  max_crdt_bytes: 1024\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxCRDTBytes != 1024 || c.Validate() != nil {
		t.Fatalf("max_crdt_bytes: %d, %v", c.Limits.MaxCRDTBytes, c.Validate())
	}
	c.Limits.MaxCRDTBytes = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_crdt_bytes") {
		t.Fatalf("a negative bound: %v", err)
	}
}

// The retention section: the file's values, the environment over them,
// and the protocol's floors refused (zero keeps the defaults, a negative
// interval turns pruning off).
func TestRetention(t *testing.T) {
	path := writeFile(t, "retention:\n  interval: 30s\n  active_window: 720h\n  age_force: 2160h\n  min_retained_commits: 5000\n")
	c, err := Load(path, env(map[string]string{"SYNCGO_RETENTION_INTERVAL": "-1s"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{Interval: -time.Second, ActiveWindow: 720 * time.Hour, AgeForce: 2160 * time.Hour, MinRetainedCommits: 5000}
	if c.Retention != want {
		t.Fatalf("retention %+v, want %+v", c.Retention, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("the defaults (all zero): %v", err)
	}
	c.Retention = Retention{ActiveWindow: 24 * time.Hour, AgeForce: 240 * time.Hour, MinRetainedCommits: 999}
	err = c.Validate()
	for _, key := range []string{"retention.active_window", "retention.age_force", "retention.min_retained_commits"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("below the floors: %v, want %s refused", err, key)
		}
	}
	c.Retention = Retention{ActiveWindow: FloorActiveWindow, AgeForce: FloorAgeForce, MinRetainedCommits: FloorRetainedCommits}
	if err := c.Validate(); err != nil {
		t.Fatalf("at the floors: %v", err)
	}
}

// retention.push_results_max_age: parsed from the file and the
// environment, off when absent, refused when negative or below the
// active window (its default or its value), accepted at it.
func TestRetentionPushResultsMaxAge(t *testing.T) {
	path := writeFile(t, "retention:\n  push_results_max_age: 2160h\n")
	c, err := Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention.PushResultsMaxAge != 2160*time.Hour {
		t.Fatalf("push_results_max_age %v, want 2160h", c.Retention.PushResultsMaxAge)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err = Load(path, env(map[string]string{"SYNCGO_RETENTION_PUSH_RESULTS_MAX_AGE": "400h"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention.PushResultsMaxAge != 400*time.Hour {
		t.Fatalf("push_results_max_age from the environment %v, want 400h", c.Retention.PushResultsMaxAge)
	}
	if Default().Retention.PushResultsMaxAge != 0 {
		t.Fatalf("the default is %v; want 0 (kept forever)", Default().Retention.PushResultsMaxAge)
	}
	for _, tt := range []struct {
		r    Retention
		want string
	}{
		{Retention{PushResultsMaxAge: -time.Hour}, "negative"},
		{Retention{PushResultsMaxAge: FloorActiveWindow - time.Hour}, "below retention.active_window 336h"},
		{Retention{ActiveWindow: 720 * time.Hour, PushResultsMaxAge: 500 * time.Hour}, "below retention.active_window 720h"},
	} {
		c.Retention = tt.r
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "retention.push_results_max_age") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v; want push_results_max_age refused (%s)", tt.r, err, tt.want)
		}
	}
	for _, r := range []Retention{{PushResultsMaxAge: FloorActiveWindow}, {ActiveWindow: 720 * time.Hour, PushResultsMaxAge: 720 * time.Hour}} {
		c.Retention = r
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v; want it accepted (at the active window)", r, err)
		}
	}
}

// schema_window: the file's relative paths are relative to its
// directory, and SYNCGO_SCHEMA_WINDOW (comma-separated) replaces them.
func TestSchemaWindowPaths(t *testing.T) {
	path := writeFile(t, "schema: v3.json\nschema_window: [v2.json, /abs/v1.json]\n")
	dir := filepath.Dir(path)
	c, err := Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "v2.json"), "/abs/v1.json"}; !reflect.DeepEqual(c.SchemaWindow, want) {
		t.Fatalf("schema_window %q, want %q", c.SchemaWindow, want)
	}
	c, err = Load(path, env(map[string]string{"SYNCGO_SCHEMA_WINDOW": "/a/v2.json,/a/v1.json"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/a/v2.json", "/a/v1.json"}; !reflect.DeepEqual(c.SchemaWindow, want) {
		t.Fatalf("schema_window from the environment %q, want %q", c.SchemaWindow, want)
	}
}

// The tracing section: a sample ratio of 1 by default, the file's and
// the environment's values, and a ratio outside 0 to 1 or an endpoint
// that is no http(s) URL refused.
func TestTracing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("tracing:\n  endpoint: http://collector:4318\n  sample_ratio: 0.25\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := Default().Tracing.SampleRatio; r != 1 {
		t.Fatalf("default sample ratio %v", r)
	}
	env := map[string]string{"SYNCGO_TRACING_SERVICE_NAME": "eu"}
	c, err := Load(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing != (Tracing{Endpoint: "http://collector:4318", SampleRatio: 0.25, ServiceName: "eu"}) || c.Validate() != nil {
		t.Fatalf("tracing %+v, %v", c.Tracing, c.Validate())
	}
	for _, bad := range []Tracing{{SampleRatio: 1.5}, {SampleRatio: -0.1}, {SampleRatio: 1, Endpoint: "collector:4318"}, {SampleRatio: 1, Endpoint: "ftp://c/"}} {
		c := Default()
		c.Tracing = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tracing.") {
			t.Errorf("tracing %+v: %v; want refused", bad, err)
		}
	}
}
