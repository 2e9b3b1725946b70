// Package config is the configuration of `syncgo serve`: one YAML file
// (docs/configuration.md), environment variables SYNCGO_* over it, and
// the command line over both. Every setting has a default, so no file is
// needed.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncgo/syncgo/auth"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/webhook"
)

// Config holds every setting of `syncgo serve`. The yaml tags are the
// file's keys; the environment variable of a scalar setting is SYNCGO_
// and its key path in upper case joined by underscores (auth.jwks_url:
// SYNCGO_AUTH_JWKS_URL); a list setting takes comma-separated values.
type Config struct {
	// Listen is the address of the protocol listener.
	Listen string `yaml:"listen"`
	// DB is an SQLite file path, a postgres:// URL or a key=value
	// Postgres DSN ("host=… dbname=…").
	DB string `yaml:"db"`
	// DBPasswordFile names a file holding the Postgres password, set into
	// DB (and DBListen) when they carry none.
	DBPasswordFile string `yaml:"db_password_file"`
	// DBListen is the Postgres DSN of the commit listener's direct
	// connection, when DB goes through a transaction pooler.
	DBListen string `yaml:"db_listen"`
	// Schema is the schema IR JSON file; empty: the demo schema.
	Schema string `yaml:"schema"`
	// SchemaWindow are schema IR JSON files of older versions still
	// served to their clients (spec §9; syncgo.Config.SchemaWindow), in
	// any order.
	SchemaWindow []string `yaml:"schema_window"`
	// Mount is the path prefix of the protocol routes.
	Mount string `yaml:"mount"`
	// Checkpoints are backfill checkpoints partition/name declared at the
	// running schema version.
	Checkpoints []string `yaml:"checkpoints"`
	// MaxConns caps simultaneous connections; 0: the file-descriptor
	// limit less a reserve.
	MaxConns int `yaml:"max_conns"`
	// IdleTimeout is how long an idle keep-alive connection is kept.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ReadHeaderTimeout bounds the reading of a request's headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// Validators are declarative write rules by table, and
	// CommitValidators declarative whole-commit rules (validators.go,
	// docs/validators.md).
	Validators       []ValidatorRule       `yaml:"validators"`
	CommitValidators []validate.CommitRule `yaml:"commit_validators"`
	// ShutdownDelay is how long, after SIGTERM or SIGINT, /readyz answers
	// 503 while the server still serves, before it stops. Default 0.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// TLSCertFile and TLSKeyFile are PEM files of the main listener's
	// certificate (chain) and private key: with both set it serves HTTPS
	// (and wss for /realtime); SIGHUP reloads them.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// Limits are the server's request limits.
	Limits Limits `yaml:"limits"`
	// Realtime tunes the realtime channel.
	Realtime Realtime `yaml:"realtime"`
	// Retention is the pruning of the commit log.
	Retention Retention `yaml:"retention"`
	// Auth is the authentication.
	Auth Auth `yaml:"auth"`
	// Scopes are the scope rules: scope variable to the rules granting
	// its values from token claims (docs/auth.md).
	Scopes auth.ScopeRules `yaml:"scopes"`
	// Segments, SignedURLs and Blobs are the segment store, signed URLs
	// and blob store settings (storage.go).
	Segments   Segments   `yaml:"segments"`
	SignedURLs SignedURLs `yaml:"signed_urls"`
	Blobs      Blobs      `yaml:"blobs"`

	// Log, Metrics, Admin and CORS are the observability and
	// browser-facing settings (docs/observability.md).
	Log     Log     `yaml:"log"`
	Metrics Metrics `yaml:"metrics"`
	Admin   Admin   `yaml:"admin"`
	CORS    CORS    `yaml:"cors"`
	Tracing Tracing `yaml:"tracing"`

	// Operations are the remote operations the binary registers
	// (operations.go).
	Operations Operations `yaml:"operations"`

	// Webhooks deliver tables' changes to HTTP endpoints as durable
	// reactions (webhooks.go, package webhook, docs/reactions.md).
	Webhooks []webhook.Hook `yaml:"webhooks"`
}

// Log configures the process log (standard error).
type Log struct {
	// Format is text or json.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Access logs one line per request at level info (route, status,
	// duration, actor, bytes; never a token or a row value).
	Access bool `yaml:"access"`
}

// Log formats.
const (
	LogText = "text"
	LogJSON = "json"
)

// Metrics configures the Prometheus metrics, served at /metrics on the
// admin listener.
type Metrics struct {
	// Enabled collects the metrics; they are served only when the admin
	// listener is on.
	Enabled bool `yaml:"enabled"`
}

// Tracing configures the OpenTelemetry traces, exported over OTLP/HTTP
// (docs/observability.md). They are on when Endpoint is set, or when the
// standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is (the exporter's other OTEL_EXPORTER_OTLP_* variables apply too).
type Tracing struct {
	// Endpoint is the collector's OTLP/HTTP traces URL
	// (http://collector:4318/v1/traces; /v1/traces is added to a URL
	// without a path).
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of traces started here that are recorded,
	// 0 to 1; a request whose traceparent says sampled (or not) follows
	// its caller. Default 1.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name of the spans; default
	// OTEL_SERVICE_NAME, else syncgo.
	ServiceName string `yaml:"service_name"`
}

// Admin configures the admin listener: the probes, /metrics and
// /debug/pprof/, which the protocol listener never serves.
type Admin struct {
	// Listen is its address; empty: no admin listener.
	Listen string `yaml:"listen"`
}

// CORS configures cross-origin requests from browsers (syncgo.CORSConfig);
// off without AllowedOrigins, and /realtime then accepts browsers of its
// own origin only.
type CORS struct {
	AllowedOrigins   []string      `yaml:"allowed_origins"`
	AllowedMethods   []string      `yaml:"allowed_methods"`
	AllowedHeaders   []string      `yaml:"allowed_headers"`
	ExposedHeaders   []string      `yaml:"exposed_headers"`
	MaxAge           time.Duration `yaml:"max_age"`
	AllowCredentials bool          `yaml:"allow_credentials"`
}

// Auth selects and configures the authentication.
type Auth struct {
	// Mode is "jwt" (verify JWTs: the auth.Config settings below), "dev"
	// (development: "Bearer <actorId>" is trusted, every scope allowed),
	// or empty: jwt when a verification key is configured, otherwise dev
	// on a loopback listen address and a refusal to start elsewhere.
	Mode        string `yaml:"mode"`
	auth.Config `yaml:",inline"`
}

// Auth modes.
const (
	ModeJWT = "jwt"
	ModeDev = "dev"
)

// Limits are request limits (syncgo.Config); zero keeps the library's
// default.
type Limits struct {
	MaxRequestBytes            int64         `yaml:"max_request_bytes"`
	MaxBodyMemory              int64         `yaml:"max_body_memory"`
	MaxFrameBytes              int           `yaml:"max_frame_bytes"`
	StallTimeout               time.Duration `yaml:"stall_timeout"`
	WriteTimeout               time.Duration `yaml:"write_timeout"`
	MaxConcurrentRequests      int           `yaml:"max_concurrent_requests"`
	MaxQueuedRequests          int           `yaml:"max_queued_requests"`
	QueueTimeout               time.Duration `yaml:"queue_timeout"`
	MaxOperationsPerRequest    int           `yaml:"max_operations_per_request"`
	MaxSubscriptionsPerRequest int           `yaml:"max_subscriptions_per_request"`
	InlineSegmentMaxBytes      int           `yaml:"inline_segment_max_bytes"`
	SegmentTTL                 time.Duration `yaml:"segment_ttl"`
	// MaxCRDTBytes bounds a crdt column value, pushed or merged (0: the
	// default, 8 MiB).
	MaxCRDTBytes int `yaml:"max_crdt_bytes"`
	// CatchUpBootstrapAfter: a pull more than this many commits behind
	// may be answered with a fresh bootstrap (0: the default, 10,000;
	// negative: never).
	CatchUpBootstrapAfter int64 `yaml:"catchup_bootstrap_after"`
	// RatePerActor and RateGlobal are request rates (per second) of POST
	// /sync and socket rounds, per actor and in total; zero: no limit
	// (syncgo.RateLimitConfig).
	RatePerActor      float64 `yaml:"rate_per_actor"`
	RatePerActorBurst int     `yaml:"rate_per_actor_burst"`
	RateGlobal        float64 `yaml:"rate_global"`
	RateGlobalBurst   int     `yaml:"rate_global_burst"`
	RateMaxActors     int     `yaml:"rate_max_actors"`
}

// Realtime tunes the realtime channel (syncgo.RealtimeConfig); zero
// keeps the library's default.
type Realtime struct {
	Heartbeat         time.Duration `yaml:"heartbeat"`
	ReresolveInterval time.Duration `yaml:"reresolve_interval"`
	QueueMessages     int           `yaml:"queue_messages"`
	QueueBytes        int           `yaml:"queue_bytes"`
	MaxDeltaBytes     int           `yaml:"max_delta_bytes"`
	MaxPresenceBytes  int           `yaml:"max_presence_bytes"`
	// MaxSockets and MaxSocketsPerActor cap the open sockets (/realtime
	// and /operations/realtime), in total and per actor; zero: no cap.
	MaxSockets         int `yaml:"max_sockets"`
	MaxSocketsPerActor int `yaml:"max_sockets_per_actor"`
	// ReleaseAfterChurn: the burst of socket connects and disconnects
	// after which free memory is returned to the system; zero keeps the
	// default (500), negative disables it, and the release after a
	// drained burst of requests with it.
	ReleaseAfterChurn int `yaml:"release_after_churn"`
	// DisableCompression declines permessage-deflate on /realtime and
	// /operations/realtime sockets (accepted by default).
	DisableCompression bool `yaml:"disable_compression"`
}

// Retention is the pruning of the commit log (spec §4.6;
// syncgo.RetentionPolicy and Config.RetentionInterval) and, when
// PushResultsMaxAge is set, of the push-result journal; zero keeps the
// default. The protocol's floors are the defaults: a host may raise
// them, not lower them.
type Retention struct {
	// Interval is how often each partition's log is pruned (default 1
	// minute); negative: never.
	Interval time.Duration `yaml:"interval"`
	// ActiveWindow: clients whose cursor moved within it hold the
	// horizon back (default and floor 14 days).
	ActiveWindow time.Duration `yaml:"active_window"`
	// AgeForce: commits older than it are pruned whatever the cursors
	// (default and floor 30 days).
	AgeForce time.Duration `yaml:"age_force"`
	// MinRetainedCommits: the newest commits always kept (default and
	// floor 1000).
	MinRetainedCommits int64 `yaml:"min_retained_commits"`
	// PushResultsMaxAge: push-result journal records older than it are
	// deleted by the retention rounds (zero: kept forever, the
	// default). It may not be below the active window (or its default).
	PushResultsMaxAge time.Duration `yaml:"push_results_max_age"`
}

// Floors of the retention policy (spec §4.6).
const (
	FloorActiveWindow    = 14 * 24 * time.Hour
	FloorAgeForce        = 30 * 24 * time.Hour
	FloorRetainedCommits = 1000
)

func (r Retention) validate() error {
	var errs []error
	if r.ActiveWindow != 0 && r.ActiveWindow < FloorActiveWindow {
		errs = append(errs, fmt.Errorf("retention.active_window %v is below the protocol's floor of 14 days (336h)", r.ActiveWindow))
	}
	if r.AgeForce != 0 && r.AgeForce < FloorAgeForce {
		errs = append(errs, fmt.Errorf("retention.age_force %v is below the protocol's floor of 30 days (720h)", r.AgeForce))
	}
	if r.MinRetainedCommits != 0 && r.MinRetainedCommits < FloorRetainedCommits {
		errs = append(errs, fmt.Errorf("retention.min_retained_commits %d is below the protocol's floor of 1000", r.MinRetainedCommits))
	}
	active := r.ActiveWindow
	if active == 0 {
		active = FloorActiveWindow
	}
	switch {
	case r.PushResultsMaxAge < 0:
		errs = append(errs, fmt.Errorf("retention.push_results_max_age %v is negative (zero or absent keeps the journal forever)", r.PushResultsMaxAge))
	case r.PushResultsMaxAge > 0 && r.PushResultsMaxAge < active:
		errs = append(errs, fmt.Errorf("retention.push_results_max_age %v is below retention.active_window %v: a client offline for less than the active window that lost a commit's ack would have it applied a second time when it retries", r.PushResultsMaxAge, active))
	}
	return errors.Join(errs...)
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Listen:            "127.0.0.1:8787",
		DB:                "syncgo.db",
		Mount:             "/",
		IdleTimeout:       2 * time.Minute,
		ReadHeaderTimeout: 10 * time.Second,
		Log:               Log{Format: LogText, Level: "info", Access: true},
		Metrics:           Metrics{Enabled: true},
		CORS:              CORS{MaxAge: 10 * time.Minute},
		Tracing:           Tracing{SampleRatio: 1},
	}
}

// EnvPrefix starts the name of every environment variable of a setting.
const EnvPrefix = "SYNCGO_"

// Load returns the defaults, overlaid with the file at path (none when
// path is empty) and then with the environment (getenv, os.Getenv when
// nil). Unknown keys of the file are errors; ${NAME} in a string of the
// file is the environment variable NAME (an unset one is an error; $${
// is a literal ${); relative file paths of the file are relative to its
// directory.
func Load(path string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, err
		}
		if err := decode(data, &c); err != nil {
			return Config{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := expand(reflect.ValueOf(&c).Elem(), "", getenv); err != nil {
			return Config{}, fmt.Errorf("%s: %w", path, err)
		}
		c.relativeTo(filepath.Dir(path))
	}
	if err := applyEnv(reflect.ValueOf(&c).Elem(), strings.TrimSuffix(EnvPrefix, "_"), getenv); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decode reads one YAML document strictly.
func decode(data []byte, c *Config) error {
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	if err := d.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file: the defaults
		}
		return err
	}
	var extra any
	if err := d.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{`)

// expandString replaces ${NAME} references.
func expandString(s string, getenv func(string) string) (string, error) {
	var err error
	out := envRef.ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case m == "$${":
			return "${"
		case m == "${":
			err = errors.New("a ${ without a variable name and }: write $${ for a literal ${")
			return m
		}
		name := m[2 : len(m)-1]
		v := getenv(name)
		if v == "" && err == nil {
			err = fmt.Errorf("${%s}: the environment variable %s is not set", name, name)
		}
		return v
	})
	return out, err
}

// expand replaces ${NAME} in every string of v.
func expand(v reflect.Value, path string, getenv func(string) string) error {
	switch v.Kind() {
	case reflect.String:
		s, err := expandString(v.String(), getenv)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetString(s)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			tag := yamlName(f)
			if tag == "-" || !f.IsExported() {
				continue
			}
			if err := expand(v.Field(i), joinPath(path, tag), getenv); err != nil {
				return err
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if err := expand(v.Index(i), fmt.Sprintf("%s[%d]", path, i), getenv); err != nil {
				return err
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			if err := expand(e, joinPath(path, fmt.Sprint(k.Interface())), getenv); err != nil {
				return err
			}
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			return expand(v.Elem(), path, getenv)
		}
	}
	return nil
}

func joinPath(path, name string) string {
	if path == "" || name == "" {
		return path + name
	}
	return path + "." + name
}

// yamlName is a field's key: "" for an inline field, "-" for none.
func yamlName(f reflect.StructField) string {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if opts == "inline" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

var durationType = reflect.TypeFor[time.Duration]()

// applyEnv sets each scalar or string-list setting whose environment
// variable is set and not empty.
func applyEnv(v reflect.Value, name string, getenv func(string) string) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key := yamlName(f)
		if key == "-" || !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		env := name
		if key != "" {
			env = name + "_" + strings.ToUpper(key)
		}
		if fv.Kind() == reflect.Struct {
			if err := applyEnv(fv, env, getenv); err != nil {
				return err
			}
			continue
		}
		raw := getenv(env)
		if raw == "" {
			continue
		}
		if err := setScalar(fv, raw); err != nil {
			return fmt.Errorf("%s: %w", env, err)
		}
	}
	return nil
}

// setScalar parses raw into a scalar or string-list field.
func setScalar(v reflect.Value, raw string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case v.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return err
		}
		v.SetFloat(f)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return err
		}
		v.SetInt(n)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var out []string
		for p := range strings.SplitSeq(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		v.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("cannot be set from the environment (%s): use the config file", v.Type())
	}
	return nil
}

// relativeTo makes the file's relative paths relative to dir.
func (c *Config) relativeTo(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	c.storageRelativeTo(dir)
	abs(&c.Schema)
	for i := range c.SchemaWindow {
		abs(&c.SchemaWindow[i])
	}
	abs(&c.DBPasswordFile)
	abs(&c.TLSCertFile)
	abs(&c.TLSKeyFile)
	abs(&c.Auth.HS256SecretFile)
	for i := range c.Webhooks {
		abs(&c.Webhooks[i].SecretFile)
		for j := range c.Webhooks[i].PreviousSecretFiles {
			abs(&c.Webhooks[i].PreviousSecretFiles[j])
		}
	}
	for i := range c.Auth.PublicKeys {
		abs(&c.Auth.PublicKeys[i].PEMFile)
	}
	if !IsPostgres(c.DB) && c.DB != "" && c.DB != ":memory:" && !strings.HasPrefix(c.DB, "file:") {
		abs(&c.DB)
	}
}

// AuthMode returns the effective auth mode for a listen address that is
// (or not) loopback, or an error when none applies.
func (c Config) AuthMode(loopback bool) (string, error) {
	switch c.Auth.Mode {
	case ModeDev:
		return ModeDev, nil
	case ModeJWT:
		return ModeJWT, nil
	case "":
		if c.Auth.Configured() {
			return ModeJWT, nil
		}
		if loopback {
			return ModeDev, nil
		}
		return "", errors.New("no authentication is configured: serve uses development authentication " +
			"(any bearer token is trusted), so it listens on a loopback address only; configure auth " +
			"(docs/auth.md), or pass -dev to acknowledge serving development authentication on this address")
	}
	return "", fmt.Errorf("auth.mode %q: want jwt or dev", c.Auth.Mode)
}

// Validate checks the settings that need neither the schema nor files.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen is empty"))
	} else if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: want host:port (or :port): %v", c.Listen, err))
	}
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			errs = append(errs, fmt.Errorf("admin.listen %q: want host:port (or :port): %v", c.Admin.Listen, err))
		}
	}
	if c.DB == "" {
		errs = append(errs, errors.New("db is empty"))
	}
	if err := checkMount(c.Mount); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateStorage(); err != nil {
		errs = append(errs, err)
	}
	if c.DBListen != "" && !IsPostgres(c.DBListen) {
		errs = append(errs, errors.New("db_listen: want a Postgres URL or key=value DSN"))
	}
	if c.DBListen != "" && !IsPostgres(c.DB) {
		errs = append(errs, errors.New("db_listen is set but db is not Postgres"))
	}
	if r := c.Tracing.SampleRatio; r < 0 || r > 1 || r != r {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio %v: want 0 to 1", r))
	}
	if e := c.Tracing.Endpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing.endpoint %q: want an http:// or https:// URL", RedactURL(e)))
		}
	}
	if c.DBPasswordFile != "" && !IsPostgres(c.DB) {
		errs = append(errs, errors.New("db_password_file is set but db is not Postgres"))
	}
	if c.MaxConns < 0 {
		errs = append(errs, errors.New("max_conns is negative"))
	}
	if c.Limits.MaxCRDTBytes < 0 {
		errs = append(errs, errors.New("limits.max_crdt_bytes must not be negative"))
	}
	if l := c.Limits; l.RatePerActor < 0 || l.RateGlobal < 0 || l.RatePerActorBurst < 0 || l.RateGlobalBurst < 0 || l.RateMaxActors < 0 {
		errs = append(errs, errors.New("limits: rate_per_actor, rate_global, their bursts and rate_max_actors must not be negative"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("tls_cert_file and tls_key_file must be set together"))
	}
	if c.Realtime.MaxSockets < 0 || c.Realtime.MaxSocketsPerActor < 0 {
		errs = append(errs, errors.New("realtime: max_sockets and max_sockets_per_actor must not be negative"))
	}
	if c.IdleTimeout < 0 || c.ReadHeaderTimeout < 0 || c.ShutdownDelay < 0 {
		errs = append(errs, errors.New("idle_timeout, read_header_timeout and shutdown_delay must not be negative"))
	}
	if !slices.Contains([]string{"", ModeJWT, ModeDev}, c.Auth.Mode) {
		errs = append(errs, fmt.Errorf("auth.mode %q: want jwt or dev", c.Auth.Mode))
	}
	if c.Auth.Mode == ModeJWT && !c.Auth.Configured() {
		errs = append(errs, errors.New("auth.mode is jwt but no verification key is set (hs256_secret, hs256_secret_file, public_keys or jwks_url)"))
	}
	for _, cp := range c.Checkpoints {
		if part, name, ok := strings.Cut(cp, "/"); !ok || part == "" || name == "" {
			errs = append(errs, fmt.Errorf("checkpoint %q: want partition/name", cp))
		}
	}
	if _, err := c.Log.SlogLevel(); err != nil {
		errs = append(errs, err)
	}
	if f := strings.ToLower(c.Log.Format); f != LogText && f != LogJSON {
		errs = append(errs, fmt.Errorf("log.format %q: want text or json", c.Log.Format))
	}
	for _, o := range c.CORS.AllowedOrigins {
		switch {
		case o == "*":
			if c.CORS.AllowCredentials {
				errs = append(errs, errors.New(`cors: allow_credentials cannot be combined with the "*" origin; list the origins`))
			}
			// A browser sends its cookies on every WebSocket handshake, and
			// the "*" origin admits any page's: a cookie token would let
			// any site open the user's socket.
			for _, ts := range c.Auth.TokenSources {
				if ts.Cookie != "" {
					errs = append(errs, fmt.Errorf(`cors: the "*" origin cannot be combined with the cookie token source %q: any site could open a user's realtime socket with it; list the origins`, ts.Cookie))
				}
			}
		case strings.Count(o, "*") > 1 || !strings.Contains(o, "://"):
			errs = append(errs, fmt.Errorf("cors.allowed_origins %q: want scheme://host[:port] with at most one *", o))
		}
	}
	if err := c.Retention.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Operations.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkMount checks that a mount is a path prefix the routes can be
// served under: segments of URL path characters (RFC 3986 pchar, no
// percent-encoding), none empty, "." or "..". A brace or a space would
// make the HTTP mux's pattern invalid (serve panicked registering it),
// and the others a prefix that no cleaned request path reaches.
func checkMount(m string) error {
	p := strings.Trim(m, "/")
	if p == "" {
		return nil
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("mount %q: want a path such as /api/sync (no empty, . or .. segment)", m)
		}
		for _, r := range seg {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~!$&'()*+,;=:@", r)) {
				return fmt.Errorf("mount %q: %q is not allowed in it; want a path such as /api/sync of letters, digits and -._~!$&'()*+,;=:@", m, r)
			}
		}
	}
	return nil
}

// SlogLevel returns the log level.
func (l Log) SlogLevel() (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return 0, fmt.Errorf("log.level %q: want debug, info, warn or error", l.Level)
	}
	return level, nil
}
