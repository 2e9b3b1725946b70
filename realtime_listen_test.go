package syncgo_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/wire"
)

// rtFleetAuth is rtAuth with a second partition: a token "q-…" is an
// actor of partition "q", every other one of rtPartition.
func rtFleetAuth(r *http.Request) (syncgo.Auth, error) {
	a, err := rtAuth(r)
	if err == nil && strings.HasPrefix(a.ActorID, "q-") {
		a.Partition = "q"
	}
	return a, err
}

// rtPostgresPair starts two servers over real HTTP, each with a store of
// its own on one fresh Postgres schema (two processes of a fleet); their
// ResolveScopes is resolve, when set, and otherwise each one's own. listen,
// when set, turns the database URL into the second one's ListenURL.
func rtPostgresPair(t *testing.T, resolve func(b *rtEnv) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error),
	listen func(db string) string) (a, b *rtEnv) {
	t.Helper()
	db := pgtest.Schema(t, "syncgo_rt_fleet", false)
	envs := make([]*rtEnv, 2)
	for i := range envs {
		cfg := pgstore.Config{URL: db, MaxConns: 4}
		if i == 1 && listen != nil {
			cfg.ListenURL = listen(db)
		}
		st, err := pgstore.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
		res := e.resolve
		if resolve != nil {
			res = resolve(e)
		}
		e.start(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtFleetAuth, ResolveScopes: res, RetentionInterval: -1})
		envs[i] = e
	}
	for _, e := range envs {
		eventually(t, "the commit listener connects", func() bool { return e.srv.RealtimeStats().ListenerConnects >= 1 })
	}
	return envs[0], envs[1]
}

// rtGatedResolver is a ResolveScopes of e that signals entered each time
// it resolves c1 (it keeps one signal), then resolves as e does (c1 waits
// for its gate, when set).
func rtGatedResolver(entered chan struct{}) func(e *rtEnv) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
	return func(e *rtEnv) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
		return func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
			if req.ClientID == "c1" {
				select {
				case entered <- struct{}{}:
				default:
				}
			}
			return e.resolve(ctx, req)
		}
	}
}

// rtStartingSocket subscribes c1 on b (current at the partition's head),
// then opens its socket, whose start waits in ResolveScopes after it read
// the partition, until release.
func rtStartingSocket(t *testing.T, b *rtEnv, entered chan struct{}) (sock *rtSock, release func()) {
	t.Helper()
	b.peer("alice", "c1").pull(rtSub("s", -1, "p1"))
	select {
	case <-entered:
	default:
	}
	release = b.gate("c1")
	t.Cleanup(release)
	sock = b.dial("alice", "c1")
	select {
	case <-entered:
	case <-time.After(rtWait):
		t.Fatal("the socket's start never called ResolveScopes")
	}
	return sock, release
}

// rtWantCovered checks that commit seq reaches a socket whose hello is
// next: a hello that asks for a sync up to it, or a delta or a wake-up.
func rtWantCovered(t *testing.T, sock *rtSock, seq int64) {
	t.Helper()
	h := sock.hello()
	if h.RequiresSync && h.LatestCursor >= seq {
		return // the client pulls the commit
	}
	m, ok := sock.tryNext(rtWait)
	if !ok {
		t.Fatalf("hello %+v, then no delta or wake-up within %v: commit %d of another process, appended while the socket started, never reached it",
			h, rtWait, seq)
	}
	if m.op == ws.OpText {
		if w, ok := sock.eventOf(m).(wire.Wake); !ok || w.Cursor < seq {
			t.Fatalf("hello %+v, then %v: want a delta or a wake-up covering commit %d", h, m, seq)
		}
		return
	}
	d := rtDecodeDelta(t, "c1", m)
	for _, f := range d.Frames {
		if c, ok := f.(*wire.Commit); ok && c.CommitSeq == seq {
			return
		}
	}
	t.Fatalf("hello %+v, then a delta %v without commit %d", h, rtFrameTypes(d), seq)
}

// A commit appended by another process while a socket of this one is
// starting (between its read of the partition and its hello), on a
// partition this process had no socket of, must still reach the socket:
// as a delta, a wake-up, or a hello that asks for a sync. The listener
// used to drop the notification (the partition had no fan-out position
// yet), and the hello, built on the older read, told the client it was
// current: the commit reached it only with the partition's next one.
func TestRealtimeRemoteCommitWhileSocketStarts(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	a, b := rtPostgresPair(t, rtGatedResolver(entered), nil)

	// A started socket on partition q of b: its deltas show how far b's
	// listener has got (it handles notifications one at a time, in order).
	b.peer("q-bob", "cq").pull(rtSub("s", -1, "p1"))
	sockQ := b.dial("q-bob", "cq")
	sockQ.hello()
	qWriter := a.peer("q-bob", "wq")
	qWriter.push("q-warm", rtTask{"qw", "p1", "warm", ""})
	sockQ.delta()

	sock, release := rtStartingSocket(t, b, entered)

	// a appends a commit c1 subscribes to, then one of partition q: once
	// q's delta arrives, b's listener has handled the first.
	seq := a.peer("alice", "w1").push("x", rtTask{"t1", "p1", "one", ""})
	qWriter.push("q-after", rtTask{"qa", "p1", "after", ""})
	sockQ.delta()

	release()
	rtWantCovered(t, sock, seq)
}

// The same while the listen connection is down: a commit another process
// appends during the outage, while a socket is starting, reaches the
// socket once the listener is back. The catch-up after the reconnect used
// to skip a partition whose sessions were all starting.
func TestRealtimeListenerOutageWhileSocketStarts(t *testing.T) {
	t.Parallel()
	var proxy *tcpProxy
	entered := make(chan struct{}, 1)
	a, b := rtPostgresPair(t, rtGatedResolver(entered), func(db string) string {
		u, err := url.Parse(db)
		if err != nil {
			t.Fatal(err)
		}
		proxy = newTCPProxy(t, u.Host)
		u.Host = proxy.addr()
		return u.String()
	})
	sock, release := rtStartingSocket(t, b, entered)

	// b's listen connection (through the proxy) is cut and stays down
	// while a appends.
	proxy.cut()
	seq := a.peer("alice", "w1").push("x", rtTask{"t1", "p1", "one", ""})
	connects := b.srv.RealtimeStats().ListenerConnects
	proxy.restore()
	eventually(t, "the listener reconnects and catches up", func() bool {
		return b.srv.RealtimeStats().ListenerConnects > connects
	})

	release()
	rtWantCovered(t, sock, seq)
}

// rtProxiedPostgres starts a server on a Postgres schema of its own that
// it reaches through a tcpProxy, which the test can cut or black-hole.
func rtProxiedPostgres(t *testing.T, schemaName string) (*rtEnv, *tcpProxy) {
	t.Helper()
	st, proxy := proxiedPostgresStore(t, schemaName, false)
	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	e.start(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve, RetentionInterval: -1})
	return e, proxy
}

// proxiedPostgresStore opens a store on a Postgres schema of its own
// through a tcpProxy: every connection when listenOnly is false, else
// only the listen connection (ListenURL).
func proxiedPostgresStore(t *testing.T, schemaName string, listenOnly bool) (*pgstore.Store, *tcpProxy) {
	t.Helper()
	db := pgtest.Schema(t, schemaName, false)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr()
	cfg := pgstore.Config{URL: u.String(), MaxConns: 4}
	if listenOnly {
		cfg.URL, cfg.ListenURL = db, u.String()
	}
	st, err := pgstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, proxy
}

// tcpProxy forwards TCP connections to a target until cut, which closes
// them and refuses new ones until restore: a network outage between a
// process and Postgres.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	hole  bool // while down: new connections are accepted and never answered
	conns map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go p.serve()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	p.mu.Lock()
	down, hole := p.down, p.hole
	if down && hole {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if down && hole {
		_, _ = io.Copy(io.Discard, c) // until cut or restore closes it
		return
	}
	if down {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
}

// cut closes every forwarded connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// blackHole closes every forwarded connection and accepts new ones that
// it never answers: a Postgres that hangs, or a balancer in front of one
// that is gone.
func (p *tcpProxy) blackHole() {
	p.cut()
	p.mu.Lock()
	p.hole = true
	p.mu.Unlock()
}

// restore forwards new connections again.
func (p *tcpProxy) restore() {
	p.mu.Lock()
	p.down, p.hole = false, false
	for c := range p.conns { // the black hole's
		_ = c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

// A Postgres outage under a running server (every connection to it cut
// and refused): requests are answered with an error, not held; /readyz
// says database; once Postgres answers again the server serves without a
// restart (its pool replaces the dead connections, its listener
// reconnects) and a socket opened before the outage gets later commits.
func TestPostgresOutageRecovers(t *testing.T) {
	t.Parallel()
	e, proxy := rtProxiedPostgres(t, "syncgo_outage")
	eventually(t, "the commit listener connects", func() bool { return e.srv.RealtimeStats().ListenerConnects >= 1 })
	probe := httptest.NewServer(e.srv.ReadyzHandler())
	t.Cleanup(probe.Close)
	ready := func() (int, string) { return readyz(t, probe.URL) }

	reader := e.peer("alice", "c1")
	reader.pull(rtSub("s", -1, "p1"))
	sock := e.dial("alice", "c1")
	sock.hello()
	writer := e.peer("alice", "w1")
	writer.push("before", rtTask{"t0", "p1", "before", ""})
	sock.delta()

	proxy.cut()
	start := time.Now()
	_, err := writer.tryPost(&wire.Request{Commits: []*wire.PushCommit{e.pushCommit("during", rtTask{"t1", "p1", "during", ""})}})
	if err == nil {
		t.Fatal("a push during the outage succeeded")
	}
	t.Logf("push during the outage: %v (after %v)", err, time.Since(start))
	if took := time.Since(start); took > rtWait {
		t.Fatalf("a push during the outage was answered after %v", took)
	}
	if status, body := ready(); status != http.StatusServiceUnavailable || !strings.Contains(body, `"phase":"database"`) {
		t.Fatalf("/readyz during the outage: %d %s", status, body)
	}

	proxy.restore()
	if status, body := ready(); status != http.StatusOK {
		t.Fatalf("/readyz once Postgres is back: %d %s", status, body)
	}
	seq := writer.push("after", rtTask{"t2", "p1", "after", ""})
	// The socket gets the commit as a delta, or a wake-up: the listener's
	// catch-up after its reconnect may wake it first (a wake-up holds
	// deltas back until the client pulls).
	for {
		m := sock.next(rtWait)
		if m.op == ws.OpText {
			if _, ok := sock.eventOf(m).(wire.Wake); !ok {
				t.Fatalf("got %v after the outage, want a delta or a wake-up", m)
			}
			return
		}
		for _, f := range rtDecodeDelta(t, "c1", m).Frames {
			if c, ok := f.(*wire.Commit); ok && c.CommitSeq == seq {
				return
			}
		}
	}
}

// Stop called while Start is still migrating (a SIGTERM during a slow
// start, in a host that runs Start on its own goroutine) must leave the
// server stopped: Start then fails rather than start the background
// services after Stop returned. It used to start them all (the commit
// listener among them, holding a Postgres connection) with nothing left
// to stop them.
func TestStopDuringStart(t *testing.T) {
	t.Parallel()
	db := pgtest.Schema(t, "syncgo_stopstart", false)
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: db, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*rtWait)
	defer cancel()

	// Another process holds the migration lock: Start waits for it.
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('syncgo.migrate:' || current_schema(), 0))`); err != nil {
		t.Fatal(err)
	}

	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()
	eventually(t, "Start waits for the migration lock", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
		return err == nil && n > 0
	})
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil { // the lock is released
		t.Fatal(err)
	}
	err = <-started
	defer srv.Stop(context.Background())
	if err == nil {
		t.Error("Start completed after Stop returned, and reported no error")
	}
	if srv.Ready() {
		t.Error("the server is ready after Stop")
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := srv.RealtimeStats().ListenerConnects; n > 0 {
			t.Fatalf("the commit listener connected after Stop returned (%d connects)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Postgres that accepts connections and never answers (hung, or a
// balancer in front of one that is gone) must not hold requests forever:
// a push is answered with an error within the connect timeout, and the
// server serves again once Postgres answers. A connection the pool opened
// then waited without a bound for the server's first message.
func TestPostgresBlackHoleAnswered(t *testing.T) {
	t.Parallel()
	e, proxy := rtProxiedPostgres(t, "syncgo_blackhole")
	writer := e.peer("alice", "w1")
	writer.push("before", rtTask{"t0", "p1", "before", ""})

	proxy.blackHole()
	// Two connect timeouts (a read, then the write) and room.
	e.pushFailsWithin(writer, 45*time.Second, "Postgres accepted connections and did not answer", proxy.restore)

	proxy.restore()
	seq := writer.push("after", rtTask{"t2", "p1", "after", ""})
	if seq < 2 {
		t.Fatalf("push after the outage: commit %d", seq)
	}
}

// readyz GETs a readiness endpoint and returns its status and body.
func readyz(t *testing.T, url string) (int, string) {
	t.Helper()
	status, _, body := fetchURL(t, url)
	return status, string(body)
}

// pushFailsWithin pushes a commit from writer while the database cannot
// serve it (what says how): the push must fail, and be answered within
// bound. On a timeout, release runs (it lets the request end) before the
// test fails.
func (e *rtEnv) pushFailsWithin(writer *rtPeer, bound time.Duration, what string, release func()) {
	t := e.t
	t.Helper()
	type answer struct {
		err  error
		took time.Duration
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		_, err := writer.tryPost(&wire.Request{Commits: []*wire.PushCommit{e.pushCommit("during", rtTask{"t1", "p1", "during", ""})}})
		done <- answer{err, time.Since(start)}
	}()
	select {
	case a := <-done:
		if a.err == nil {
			t.Fatalf("a push succeeded while %s", what)
		}
		t.Logf("push while %s: %v (after %v)", what, a.err, a.took)
	case <-time.After(bound):
		release()
		t.Fatalf("a push was not answered within %v while %s", bound, what)
	}
}
