package syncgo_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Lost database connections, over real HTTP on Postgres: the backends are
// terminated for real (pg_terminate_backend), as a failover or a Postgres
// restart does. The server runs the work again on another connection and
// answers as if nothing happened; only when that fails too does it answer
// the retryable 500.

// lossEnv is an e2e environment on a Postgres store whose connections are
// named app, with the HTTP statuses it answered.
type lossEnv struct {
	*e2eEnv
	schemaURL, app string
	mu             sync.Mutex
	statuses       []int
}

// newLossEnv starts a server on a store opened by open (the schema's URL,
// with application_name app); its handler records every status.
func newLossEnv(t *testing.T, open func(t *testing.T, u string) store.Store) *lossEnv {
	t.Helper()
	le := &lossEnv{app: "syncgo-loss-" + randomHex(t)}
	u, err := url.Parse(pgtest.Schema(t, "syncgo_loss", false))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", le.app)
	u.RawQuery = q.Encode()
	le.schemaURL = u.String()
	le.e2eEnv = newE2EEnv(t, e2eDriver{name: "postgres", open: func(t *testing.T) store.Store { return open(t, le.schemaURL) }})
	h := le.srv.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		le.mu.Lock()
		le.statuses = append(le.statuses, rec.status)
		le.mu.Unlock()
	}))
	t.Cleanup(hs.Close)
	le.url = hs.URL
	le.allow("alice", map[string][]string{"project_id": {"p1"}})
	return le
}

// openLossStore opens a pgstore from the URL.
func openLossStore(t *testing.T, u string) store.Store {
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: u, MaxConns: 8})
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// failed returns the statuses of 500 and above answered since from.
func (le *lossEnv) failed(from int) []int {
	le.mu.Lock()
	defer le.mu.Unlock()
	var bad []int
	for _, s := range le.statuses[from:] {
		if s >= 500 {
			bad = append(bad, s)
		}
	}
	return bad
}

// answered is how many responses the server sent.
func (le *lossEnv) answered() int {
	le.mu.Lock()
	defer le.mu.Unlock()
	return len(le.statuses)
}

// terminateApp ends every backend of the store's connections and waits
// until they are gone, as a Postgres restart does.
func (le *lossEnv) terminateApp(t *testing.T) int {
	t.Helper()
	return terminatePids(t, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, le.app)
}

// terminatePids ends the backends whose pids the query selects and waits
// until they are gone. The selection is materialized first: a
// pg_terminate_backend in the same scan's filter could run before the
// selection's own condition, on every backend of the server.
func terminatePids(t *testing.T, pids string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ended []int32
	if err := conn.QueryRow(ctx, `WITH p AS MATERIALIZED (`+pids+`)
SELECT coalesce(array_agg(pid), '{}') FROM (SELECT pid, pg_terminate_backend(pid) AS ended FROM p WHERE pid <> pg_backend_pid()) x WHERE ended`, args...).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	for {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, ended).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return len(ended)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d terminated backends still there", left)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// statusRecorder keeps the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	once   bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.once {
		r.status, r.once = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.once = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// randomHex returns 12 random hex digits.
func randomHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// schemaOf returns the search_path of a pgtest schema URL.
func schemaOf(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Query().Get("search_path")
}

// lossQueryInt runs a query of one integer on a connection of its own.
func lossQueryInt(t *testing.T, u, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestPostgresPushConnectionLost: the backend of a push's transaction is
// terminated before its COMMIT (a trigger of the test's schema on the
// commit log terminates its own backend, once). The push's one HTTP
// response is 200 with the commit applied, and the log holds it once.
func TestPostgresPushConnectionLost(t *testing.T) {
	base := pgtest.URL(t)
	t.Parallel()
	le := newLossEnv(t, openLossStore)
	name := schemaOf(t, le.schemaURL)
	pgtest.KillOnCommitLog(t, base, name, "kill_append", "nextval('"+name+".kills') = 1", false)

	c := le.client("alice", sspclient.Options{})
	id := mustUpsert(t, c, taskRow("t1", "p1", "one"))
	before := le.answered()
	res, err := c.Sync(context.Background())
	if err != nil {
		t.Fatalf("push after the lost connection: %v", err)
	}
	if o := pushed(t, res, id); o.Status != wire.PushApplied {
		t.Errorf("push after the lost connection: %s; want applied", statusOf(o))
	}
	if bad := le.failed(before); len(bad) > 0 {
		t.Errorf("the push's round was answered with failures %v; want none", bad)
	}
	if n := lossQueryInt(t, le.schemaURL, `SELECT count(*) FROM sync_commits WHERE client_commit_id = $1`, id); n != 1 {
		t.Errorf("the log holds the commit %d times; want 1", n)
	}
	if n := lossQueryInt(t, le.schemaURL, `SELECT last_value FROM `+name+`.kills`); n < 2 {
		t.Errorf("the trigger ran %d times; want 2 (the terminated run and the one again)", n)
	}
	if n := le.store.Stats().ConnRetries; n < 1 {
		t.Errorf("Stats().ConnRetries = %d; want at least 1", n)
	}
}

// TestPostgresConnectionsTerminated: every connection of the server's
// store is terminated while idle, as a Postgres restart does. The next
// pull and the next push each succeed at once: no 500.
func TestPostgresConnectionsTerminated(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	le := newLossEnv(t, openLossStore)
	writer, reader := le.client("alice", sspclient.Options{}), le.client("alice", sspclient.Options{})
	mustSubscribe(t, reader, "s1", "p1")
	mustUpsert(t, writer, taskRow("t1", "p1", "one"))
	syncQuiet(t, writer)
	syncQuiet(t, reader)
	// The pool's connections open and idle, as on a busy server.
	pool := le.store.(*pgstore.Store).Pool()
	var conns []*pgxpool.Conn
	for range pool.Config().MaxConns {
		conn, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	if n := le.terminateApp(t); n < len(conns) {
		t.Fatalf("terminated %d backends; want the pool's %d", n, len(conns))
	}
	before := le.answered()
	if _, err := reader.Sync(context.Background()); err != nil {
		t.Fatalf("pull after the restart: %v", err)
	}
	id := mustUpsert(t, writer, taskRow("t2", "p1", "two"))
	res, err := writer.Sync(context.Background())
	if err != nil {
		t.Fatalf("push after the restart: %v", err)
	}
	if o := pushed(t, res, id); o.Status != wire.PushApplied {
		t.Errorf("push after the restart: %s; want applied", statusOf(o))
	}
	if bad := le.failed(before); len(bad) > 0 {
		t.Errorf("answers after the restart: %v; want none of 500 or above", bad)
	}
	syncQuiet(t, reader)
	sameRows(t, "reader after the restart", clientRows(t, reader, "tasks"), le.serverRows("tasks"))
}

// TestPostgresReadRetryFails: the connections are terminated and no new
// one can be made (the pool's dialer refuses). A pull fails with the
// retryable internal error (500) after its bounded runs again, not a
// hang; once connections can be made, the next pull succeeds.
func TestPostgresReadRetryFails(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	var refuse *atomic.Bool
	le := newLossEnv(t, func(t *testing.T, u string) store.Store {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		refuse = pgtest.RefuseDials(&cfg.ConnConfig.Config)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := pgstore.Open(context.Background(), pgstore.Config{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
	reader := le.client("alice", sspclient.Options{})
	mustSubscribe(t, reader, "s1", "p1")
	syncQuiet(t, reader)
	refuse.Store(true)
	le.terminateApp(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := reader.Sync(ctx)
	var he *sspclient.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusInternalServerError || he.Code() != syncerr.CodeInternalError {
		t.Fatalf("pull with no connection to be had: %v; want HTTP 500 %s", err, syncerr.CodeInternalError)
	}
	if ent, _ := syncerr.Lookup(he.Code()); !ent.Retryable {
		t.Errorf("%s is not retryable", he.Code())
	}
	if ctx.Err() != nil {
		t.Errorf("the pull failed at its deadline: %v", err)
	}
	refuse.Store(false)
	if _, err := reader.Sync(context.Background()); err != nil {
		t.Errorf("pull once connections can be made: %v", err)
	}
}
