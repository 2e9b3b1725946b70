package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/auth"
	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

//go:embed demo_schema.json
var demoSchema []byte

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// declarations parses the checkpoints partition/name; the version is the
// running schema's.
func declarations(checkpoints []string, version int32) ([]store.CheckpointDeclaration, error) {
	var out []store.CheckpointDeclaration
	for _, c := range checkpoints {
		part, name, ok := strings.Cut(c, "/")
		if !ok || part == "" || name == "" {
			return nil, fmt.Errorf("checkpoint %q: want partition/name", c)
		}
		out = append(out, store.CheckpointDeclaration{Partition: part, Name: name, SchemaVersion: version})
	}
	return out, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// bindServeFlags declares the flags of serve's settings on fs; the
// returned function applies those given on the command line over c
// (flags > environment > file > defaults).
func bindServeFlags(fs *flag.FlagSet) func(c *config.Config) {
	d := config.Default()
	var (
		listen, db, dbListen, schemaPath, mount string
		dev                                     bool
		maxConns                                int
		idle, drain                             time.Duration
		checkpoints                             stringList
	)
	fs.StringVar(&listen, "listen", d.Listen, "listen address (listen, SYNCGO_LISTEN)")
	fs.StringVar(&db, "db", d.DB, "SQLite file path, postgres:// URL or key=value Postgres DSN (db, SYNCGO_DB)")
	fs.StringVar(&dbListen, "db-listen", "", "Postgres DSN of the commit listener's direct connection, when -db goes through a transaction pooler (db_listen, SYNCGO_DB_LISTEN)")
	fs.StringVar(&schemaPath, "schema", "", "schema IR JSON file; default: a small demo schema (schema, SYNCGO_SCHEMA)")
	fs.StringVar(&mount, "mount", d.Mount, "path prefix of the protocol routes (mount, SYNCGO_MOUNT)")
	fs.BoolVar(&dev, "dev", false, "development authentication: any 'Bearer <actorId>' is trusted and may use every scope; "+
		"needed to serve it on a non-loopback address (auth.mode: dev, SYNCGO_AUTH_MODE=dev)")
	fs.IntVar(&maxConns, "max-conns", 0, "cap on simultaneous connections, sockets included; 0: the file-descriptor limit less a reserve (max_conns, SYNCGO_MAX_CONNS)")
	fs.DurationVar(&idle, "idle-timeout", d.IdleTimeout, "how long an idle keep-alive connection is kept (idle_timeout, SYNCGO_IDLE_TIMEOUT)")
	fs.DurationVar(&drain, "shutdown-delay", d.ShutdownDelay, "on SIGTERM or SIGINT, how long /readyz answers 503 (stopping) while the server still serves, before it stops: the time a load balancer needs to take it out (shutdown_delay, SYNCGO_SHUTDOWN_DELAY)")
	fs.Var(&checkpoints, "checkpoint", "declare a backfill checkpoint partition/name at the running schema version: this process serves while it is incomplete (repeatable; checkpoints, SYNCGO_CHECKPOINTS)")
	return func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "listen":
				c.Listen = listen
			case "db":
				c.DB = db
			case "db-listen":
				c.DBListen = dbListen
			case "schema":
				c.Schema = schemaPath
			case "mount":
				c.Mount = mount
			case "dev":
				if dev {
					c.Auth.Mode = config.ModeDev
				}
			case "max-conns":
				c.MaxConns = maxConns
			case "idle-timeout":
				c.IdleTimeout = idle
			case "shutdown-delay":
				c.ShutdownDelay = drain
			case "checkpoint":
				c.Checkpoints = checkpoints
			}
		})
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", os.Getenv("SYNCGO_CONFIG"), "YAML config file (docs/configuration.md); flags and SYNCGO_* variables override it (SYNCGO_CONFIG)")
	apply := bindServeFlags(fs)
	applyObserve := bindObserveFlags(fs)  // serve_observe.go
	applySegments := bindSegmentFlags(fs) // serve_segments.go
	applyLimits := bindLimitFlags(fs)     // serve_limits.go
	applyTLS := bindTLSFlags(fs)          // serve_tls.go
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "syncgo serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := config.Load(*configPath, nil)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo serve: config:", config.RedactDSN(err.Error()))
		return 1
	}
	apply(&cfg)
	applyObserve(&cfg)
	applySegments(&cfg)
	applyLimits(&cfg)
	applyTLS(&cfg)
	secrets := cfg.Secrets()
	stdout = config.NewRedactingWriter(stdout, secrets)
	stderr = config.NewRedactingWriter(stderr, secrets)
	// The access log's lines are written in groups (logbuffer.go); the
	// server's own at once, after them.
	lines := newLineBuffer(stderr, accessFlushDelay)
	defer func() { _ = lines.Flush() }()
	logger, err := newLogger(cfg.Log, lines.direct())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo serve: config:", err)
		return 1
	}
	accessLog, err := newLogger(cfg.Log, lines)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo serve: config:", err)
		return 1
	}
	if err := serve(ctx, cfg, logger, accessLog, stdout); err != nil {
		fmt.Fprintln(stderr, "syncgo serve:", err)
		return 1
	}
	return 0
}

// loadSchemaWindow compiles the older schemas of the schema window
// (config schema_window), newest first, and checks them against the
// running schema as syncgo.New does, naming the file at fault.
func loadSchemaWindow(paths []string, current *schema.Compiled) ([]*schema.Compiled, error) {
	window := make([]*schema.Compiled, 0, len(paths))
	files := map[*schema.Compiled]string{}
	for _, p := range paths {
		if p == "" {
			return nil, errors.New("schema_window: an empty file name")
		}
		sc, err := loadSchema(p)
		if err != nil {
			return nil, fmt.Errorf("schema_window: %s: %w", p, err)
		}
		if err := syncgo.CheckCRDTMergers(nil, sc); err != nil {
			return nil, fmt.Errorf("schema_window: %s: %w", p, err)
		}
		window, files[sc] = append(window, sc), p
	}
	slices.SortStableFunc(window, func(a, b *schema.Compiled) int { return cmp.Compare(b.Version(), a.Version()) })
	for i, sc := range window {
		if i > 0 && sc.Version() == window[i-1].Version() {
			return nil, fmt.Errorf("schema_window: %s and %s are both version %d", files[window[i-1]], files[sc], sc.Version())
		}
	}
	if err := engine.ValidateWindow(current, window); err != nil {
		return nil, err
	}
	return window, nil
}

func loadSchema(path string) (*schema.Compiled, error) {
	data := demoSchema
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	s, err := schema.ParseJSON(data)
	if err != nil {
		return nil, err
	}
	return schema.Compile(s)
}

func openStore(ctx context.Context, db string, logger *slog.Logger) (store.Store, error) {
	return openStoreListen(ctx, db, "", logger, 0)
}

// openStoreReadOnly opens a store that writes nothing: no DDL, no
// migration, and a missing SQLite file is an error.
func openStoreReadOnly(ctx context.Context, db string) (store.Store, error) {
	logger := slog.New(slog.DiscardHandler)
	if config.IsPostgres(db) {
		return pgstore.Open(ctx, pgstore.Config{URL: db, Logger: logger, ReadOnly: true})
	}
	return sqlitestore.Open(ctx, sqlitestore.Config{Path: db, Logger: logger, ReadOnly: true})
}

// commitLogHolder is what both drivers' stores offer to tell a sync
// database from another one.
type commitLogHolder interface {
	HoldsCommitLog(ctx context.Context) (bool, error)
}

// openExistingStore opens the store of an existing sync database for an
// operator command, read-only when asked. A database without a commit log
// (a mistyped SQLite path, an empty file, another application's database
// or Postgres schema) is refused before anything is written: only serve
// creates a database.
func openExistingStore(ctx context.Context, db string, readOnly bool) (store.Store, error) {
	ro, err := openStoreReadOnly(ctx, db)
	if err != nil {
		return nil, err
	}
	h, ok := ro.(commitLogHolder)
	if !ok {
		ro.Close()
		return nil, errors.New("this store cannot tell whether it holds a sync database")
	}
	holds, err := h.HoldsCommitLog(ctx)
	if err == nil && !holds {
		err = fmt.Errorf("%s is not a syncgo database: it has no sync_commits table (only syncgo serve creates one; check -db)", config.RedactDSN(db))
	}
	if err != nil || readOnly {
		if err != nil {
			ro.Close()
			return nil, err
		}
		return ro, nil
	}
	ro.Close()
	return openStore(ctx, db, slog.New(slog.DiscardHandler))
}

// serveMinConns is how many Postgres connections a server opens at start:
// a cold bootstrap scans its pages on up to GOMAXPROCS connections (at
// most 4) beside the request's own reads, and on a fresh pool each of them
// was made inside the first bootstrap (100,000 rows: 303 -> 271 ms with
// them open at start).
func serveMinConns() int32 { return int32(min(runtime.GOMAXPROCS(0), 4) + 2) }

// openStoreListen opens the store of db; on Postgres, with the listen
// connection's URL and a pool that opens minConns connections at start.
func openStoreListen(ctx context.Context, db, listen string, logger *slog.Logger, minConns int32) (store.Store, error) {
	if config.IsPostgres(db) {
		return pgstore.Open(ctx, pgstore.Config{URL: db, ListenURL: listen, Logger: logger, MinConns: minConns})
	}
	return sqlitestore.Open(ctx, sqlitestore.Config{Path: db, Logger: logger})
}

func serve(ctx context.Context, cfg config.Config, logger, accessLog *slog.Logger, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Listen first: an address the development authentication must not
	// be served on is refused before the database is opened.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	var certs *certReloader
	if cfg.TLSCertFile != "" {
		if certs, err = newCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, logger); err != nil {
			return err
		}
		defer certs.close()
	}
	var obs observability // serve_observe.go: admin listener, metrics, access log, CORS
	if err := obs.listen(cfg, logger); err != nil {
		return err
	}
	defer obs.close()
	if err := obs.startTracing(ctx, os.Getenv); err != nil {
		return err
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	loopback := ok && addr.IP.IsLoopback()
	mode, err := cfg.AuthMode(loopback)
	if err != nil {
		return fmt.Errorf("refusing to listen on %s: %w", ln.Addr(), err)
	}
	plan, err := planServe(cfg, mode, loopback, ln.Addr(), logger)
	if err != nil {
		return err
	}
	defer plan.close()
	db, dbListen := cfg.DB, cfg.DBListen
	if cfg.DBPasswordFile != "" {
		pw, err := os.ReadFile(cfg.DBPasswordFile)
		if err != nil {
			return fmt.Errorf("db_password_file: %w", err)
		}
		password := strings.TrimRight(string(pw), "\r\n")
		if db, err = config.WithPassword(db, password); err != nil {
			return err
		}
		if dbListen != "" {
			if dbListen, err = config.WithPassword(dbListen, password); err != nil {
				return err
			}
		}
	}
	st, err := openStoreListen(ctx, db, dbListen, logger, serveMinConns())
	if err != nil {
		return fmt.Errorf("open %s: %w", config.RedactDSN(cfg.DB), err)
	}
	defer st.Close()
	scfg, err := plan.serverConfig(cfg, st, &obs, accessLog, ln.Addr(), logger)
	if err != nil {
		return err
	}
	srv, err := syncgo.New(scfg)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	// The stop is bounded (stopWait after the listener closes), webhook
	// deliveries under way included: past it their contexts are
	// cancelled and they are given back (pending, the attempt not
	// counted) rather than keep the process up for a hook's timeout.
	var stopBy time.Time
	defer func() {
		if stopBy.IsZero() {
			stopBy = time.Now().Add(stopWait)
		}
		ctx, cancel := context.WithDeadline(context.Background(), stopBy)
		defer cancel()
		_ = srv.Stop(ctx)
	}()
	mux := http.NewServeMux()
	obs.mount(mux, srv)
	mount := "/" + strings.Trim(cfg.Mount, "/")
	if mount == "/" {
		mux.Handle("/", srv.Handler())
	} else {
		mux.Handle(mount+"/", http.StripPrefix(mount, srv.Handler()))
	}
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = defaultMaxConns()
	}
	ln = syncgo.LimitListener(ln, maxConns)
	// Request bodies and responses are bounded per chunk by the server
	// (Config.StallTimeout, Config.WriteTimeout): no total ReadTimeout or
	// WriteTimeout here, which would cut off a slow mobile client that is
	// making progress, and a socket's life.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: cfg.IdleTimeout,
		ConnState: srv.ConnState, ErrorLog: httpErrorLog(logger)}
	scheme := "http"
	if certs != nil { // serve_tls.go
		hs.TLSConfig = certs.tlsConfig()
		ln = tls.NewListener(ln, hs.TLSConfig)
		scheme = "https"
	}
	fmt.Fprintf(stdout, "syncgo listening on %s://%s%s (database %s, auth %s)\n", scheme, ln.Addr(), strings.TrimSuffix(mount, "/"), config.RedactDSN(cfg.DB), mode)
	obs.serve(srv, logger, stdout)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if cfg.ShutdownDelay > 0 {
		// /readyz turns 503 at once; the load balancer stops sending new
		// clients while the requests and sockets here go on.
		srv.Drain()
		logger.Info("draining before the stop", "shutdown_delay", cfg.ShutdownDelay)
		select {
		case err := <-errc:
			return err
		case <-time.After(cfg.ShutdownDelay):
		}
	}
	// Not ready from here on (the probes on the admin listener answer
	// while the main listener, closed now, waits for its requests).
	srv.Drain()
	shutdown, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	stopBy, _ = shutdown.Deadline()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// The wait is over: connections still busy (a slow client's
		// upload) are cut, and the stop is still a clean one.
		logger.Warn("connections still busy 10 s after the stop signal were closed")
		_ = hs.Close()
	}
	return nil
}

// stopWait bounds the stop: the running requests, then the webhook
// deliveries under way, share it.
const stopWait = 10 * time.Second

func sourcesString(sources []auth.TokenSource) string {
	if len(sources) == 0 {
		return "header Authorization"
	}
	var out []string
	for _, s := range sources {
		out = append(out, s.String())
	}
	return strings.Join(out, ", ")
}

// devAuthenticate trusts "Authorization: Bearer <actorId>": development only.
func devAuthenticate(r *http.Request) (syncgo.Auth, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return syncgo.Auth{}, errors.New("missing bearer token")
	}
	return syncgo.Auth{ActorID: strings.TrimSpace(token), Partition: "default"}, nil
}

// devResolver allows every scope value of every declared variable:
// development only.
func devResolver(sc *schema.Compiled) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
	all := map[string][]string{}
	for _, v := range sc.Variables() {
		all[v] = []string{"*"}
	}
	return func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return all, nil }
}

// httpErrorLog is the main listener's http.Server.ErrorLog: what net/http
// reports about connections goes to the process log, in its format and
// through its redaction, instead of to the standard logger's raw lines.
// A handler's panic is an error of the server; the rest (a client's
// failed TLS handshake, a connection it broke) is the client's doing: a
// warning.
func httpErrorLog(logger *slog.Logger) *log.Logger {
	return log.New(httpErrorWriter{logger}, "", 0)
}

type httpErrorWriter struct{ log *slog.Logger }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: panic serving") {
		level = slog.LevelError
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}
