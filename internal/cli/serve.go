package cli

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

//go:embed demo_schema.json
var demoSchema []byte

type serveFlags struct {
	listen      string
	db          string
	dbListen    string
	schema      string
	mount       string
	checkpoints stringList
	// dev acknowledges that the development authentication is served on
	// an address other hosts can reach.
	dev      bool
	maxConns int
	idle     time.Duration
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// declarations parses -checkpoint partition/name flags; the version is
// the running schema's.
func (f serveFlags) declarations(version int32) ([]store.CheckpointDeclaration, error) {
	var out []store.CheckpointDeclaration
	for _, c := range f.checkpoints {
		part, name, ok := strings.Cut(c, "/")
		if !ok || part == "" || name == "" {
			return nil, fmt.Errorf("-checkpoint %q: want partition/name", c)
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

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	fs.StringVar(&f.listen, "listen", envOr("SYNCGO_LISTEN", "127.0.0.1:8787"), "listen address (SYNCGO_LISTEN)")
	fs.StringVar(&f.db, "db", envOr("SYNCGO_DB", "syncgo.db"), "SQLite file path or postgres:// URL (SYNCGO_DB)")
	fs.StringVar(&f.dbListen, "db-listen", envOr("SYNCGO_DB_LISTEN", ""), "Postgres URL for the commit listener's direct connection, when -db goes through a transaction pooler (SYNCGO_DB_LISTEN)")
	fs.StringVar(&f.schema, "schema", envOr("SYNCGO_SCHEMA", ""), "schema IR JSON file; default: a small demo schema (SYNCGO_SCHEMA)")
	fs.StringVar(&f.mount, "mount", envOr("SYNCGO_MOUNT", "/"), "path prefix of the protocol routes (SYNCGO_MOUNT)")
	fs.BoolVar(&f.dev, "dev", false, "acknowledge that the development authentication (any bearer token is an actor with every scope) "+
		"is served on a non-loopback -listen address; without it serve listens on loopback addresses only")
	fs.IntVar(&f.maxConns, "max-conns", envInt("SYNCGO_MAX_CONNS", 0), "cap on simultaneous connections, sockets included; 0: the file-descriptor limit less a reserve (SYNCGO_MAX_CONNS)")
	fs.DurationVar(&f.idle, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept")
	fs.Var(&f.checkpoints, "checkpoint", "declare a backfill checkpoint partition/name at the running schema version: this process serves while it is incomplete (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, f, logger, stdout); err != nil {
		fmt.Fprintln(stderr, "syncgo serve:", err)
		return 1
	}
	return 0
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
	return openStoreListen(ctx, db, "", logger)
}

// openStoreReadOnly opens a store that writes nothing: no DDL, no
// migration, and a missing SQLite file is an error.
func openStoreReadOnly(ctx context.Context, db string) (store.Store, error) {
	logger := slog.New(slog.DiscardHandler)
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return pgstore.Open(ctx, pgstore.Config{URL: db, Logger: logger, ReadOnly: true})
	}
	return sqlitestore.Open(ctx, sqlitestore.Config{Path: db, Logger: logger, ReadOnly: true})
}

func openStoreListen(ctx context.Context, db, listen string, logger *slog.Logger) (store.Store, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		return pgstore.Open(ctx, pgstore.Config{URL: db, ListenURL: listen, Logger: logger})
	}
	return sqlitestore.Open(ctx, sqlitestore.Config{Path: db, Logger: logger})
}

func serve(ctx context.Context, f serveFlags, logger *slog.Logger, stdout io.Writer) error {
	// Listen first: an address the development authentication must not
	// be served on is refused before the database is opened.
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	if addr, ok := ln.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
		if !f.dev {
			return fmt.Errorf("refusing to listen on %s: serve uses development authentication (any bearer token is trusted), "+
				"so it listens on a loopback address only; pass -dev to acknowledge serving it on %s anyway, "+
				"or embed syncgo with your own Authenticate and ResolveScopes", ln.Addr(), f.listen)
		}
		logger.Warn("DEVELOPMENT AUTHENTICATION ON A NON-LOOPBACK ADDRESS (-dev): anyone who can reach " +
			ln.Addr().String() + " can read and write every scope")
	}
	sc, err := loadSchema(f.schema)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	decls, err := f.declarations(sc.Version())
	if err != nil {
		return err
	}
	st, err := openStoreListen(ctx, f.db, f.dbListen, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	logger.Warn("DEVELOPMENT AUTHENTICATION: 'Authorization: Bearer <actorId>' is trusted as is, " +
		"every actor is in partition \"default\" and may read and write every scope. " +
		"Embed syncgo and supply Authenticate and ResolveScopes for production.")
	srv, err := syncgo.New(syncgo.Config{
		Store:         st,
		Schema:        sc,
		Authenticate:  devAuthenticate,
		ResolveScopes: devResolver(sc),
		Logger:        logger,
		Declarations:  decls,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop(context.Background())
	mux := http.NewServeMux()
	mount := "/" + strings.Trim(f.mount, "/")
	if mount == "/" {
		mux.Handle("/", srv.Handler())
	} else {
		mux.Handle(mount+"/", http.StripPrefix(mount, srv.Handler()))
	}
	maxConns := f.maxConns
	if maxConns <= 0 {
		maxConns = defaultMaxConns()
	}
	ln = syncgo.LimitListener(ln, maxConns)
	// Request bodies and responses are bounded per chunk by the server
	// (Config.StallTimeout, Config.WriteTimeout): no total ReadTimeout or
	// WriteTimeout here, which would cut off a slow mobile client that is
	// making progress, and a socket's life.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: f.idle}
	fmt.Fprintf(stdout, "syncgo listening on http://%s%s (database %s)\n", ln.Addr(), strings.TrimSuffix(mount, "/"), f.db)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
