package syncgo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Remote commands (REMOTE.md §3) whose transaction loses its Postgres
// connection, over real HTTP: before the COMMIT (a trigger terminates
// its own backend as the commit is appended), during the COMMIT (a
// deferred trigger terminates it at COMMIT time: the transaction does not
// commit, and the server cannot know it), and after the COMMIT was
// carried out but before its answer came back (the connection is cut on
// the server's side of the socket once the COMMIT was sent: the commit is
// durable and the server cannot know it). Every time the command's one
// HTTP response is its result, and the log holds its commit once.

// commitCut cuts, once armed, the first connection that sends a COMMIT,
// once the server answered it: the COMMIT was carried out, and its answer
// never reaches the store (the connection reads EOF, as when the network
// or the server's host fails at that moment).
type commitCut struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

// dial wraps a dialer.
func (c *commitCut) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: nc, c: c}, nil
	}
}

// cutConn is a connection that commitCut may cut.
type cutConn struct {
	net.Conn
	c       *commitCut
	tripped atomic.Bool
	once    sync.Once
}

// executesCommit reports whether b, frontend messages from a message's
// start, runs a COMMIT: an unnamed statement's Parse of it (the store's
// connections here parse each statement every time) and an Execute after
// it. The describe round trip that may come first parses it and runs
// nothing.
func executesCommit(b []byte) bool {
	parsed := false
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || len(b) < 1+n {
			return false
		}
		body := b[5 : 1+n]
		switch b[0] {
		case 'P':
			parsed = parsed || bytes.HasPrefix(body, []byte("\x00COMMIT\x00"))
		case 'E':
			if parsed {
				return true
			}
		}
		b = b[1+n:]
	}
	return false
}

func (cc *cutConn) Write(b []byte) (int, error) {
	if executesCommit(b) && cc.c.armed.CompareAndSwap(true, false) {
		cc.tripped.Store(true)
		cc.c.cuts.Add(1)
	}
	return cc.Conn.Write(b)
}

func (cc *cutConn) Read(b []byte) (int, error) {
	var first []byte
	if !cc.tripped.Load() {
		n, err := cc.Conn.Read(b)
		if !cc.tripped.Load() {
			return n, err
		}
		first = b[:n]
	}
	// What the server answered after the COMMIT was sent is dropped, once
	// the whole answer came (the COMMIT was carried out).
	cc.once.Do(func() {
		drainThroughReady(cc.Conn, first)
		_ = cc.Conn.Close()
	})
	return 0, io.EOF
}

// drainThroughReady reads the server's messages, first being the start of
// them, until a ReadyForQuery (the end of the pipeline's answer), for at
// most 10 s.
func drainThroughReady(c net.Conn, first []byte) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := append([]byte(nil), first...)
	tmp := make([]byte, 4096)
	for {
		for i := 0; i+5 <= len(buf); {
			n := int(binary.BigEndian.Uint32(buf[i+1 : i+5]))
			if n < 4 || i+1+n > len(buf) {
				break
			}
			if buf[i] == 'Z' {
				return
			}
			i += 1 + n
		}
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			return
		}
	}
}

// openCutStore opens a pgstore of the schema URL whose connections
// commitCut may cut.
func openCutStore(t *testing.T, u string, cut *commitCut) *pgstore.Store {
	t.Helper()
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 8
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pc.ConnConfig.DialFunc = cut.dial(pc.ConnConfig.DialFunc)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.Open(context.Background(), pgstore.Config{Pool: pool})
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// cmdLossEnv is an operations server on a Postgres schema of its own.
type cmdLossEnv struct {
	*opsFixture
	st        *pgstore.Store
	schemaURL string
	name      string
	cut       *commitCut
}

func newCmdLossEnv(t *testing.T, tweak ...func(*syncgo.Config)) *cmdLossEnv {
	t.Helper()
	e := &cmdLossEnv{schemaURL: pgtest.Schema(t, "syncgo_cmdloss", false), cut: &commitCut{}}
	e.name = schemaOf(t, e.schemaURL)
	e.st = openCutStore(t, e.schemaURL, e.cut)
	e.opsFixture = newOpsFixtureOn(t, e.st, tweak...)
	return e
}

// logged is how many commits of the log have the client commit id.
func (e *cmdLossEnv) logged(t *testing.T, commitID string) int64 {
	t.Helper()
	return lossQueryInt(t, e.schemaURL, `SELECT count(*) FROM sync_commits WHERE client_commit_id = $1`, commitID)
}

// createTask is the command's request; its commit id is
// ["createTask",requestID].
func createTask(requestID, id string) remotewire.Object {
	return command("job", "createTask", requestID, remotewire.Object{{Key: "id", Value: id},
		{Key: "project", Value: "p1"}, {Key: "title", Value: "from " + requestID}})
}

func cmdCommitID(requestID string) string { return `["createTask","` + requestID + `"]` }

// TestPostgresCommandConnectionLost: a command's transaction loses its
// connection before its COMMIT, during it, and after it. The command's
// one response is its result (applied), its function ran again only when
// its first run did not commit, and a retry with the same requestId is
// answered from the journal (cached, the same commitSeq).
func TestPostgresCommandConnectionLost(t *testing.T) {
	base := pgtest.URL(t)
	t.Parallel()
	e := newCmdLossEnv(t)
	seed(t, e.e2eEnv, "alice", "tasks", taskRow("t0", "p1", "zero"))
	// Before the COMMIT: the append of a commit of requestId kill-before.
	pgtest.KillOnCommitLog(t, base, e.name, "kill_append", `NEW.client_commit_id LIKE '%"kill-before"%' AND nextval('`+e.name+`.kills') % 2 = 1`, false)
	// During the COMMIT (deferred to it): a commit of requestId kill-commit.
	pgtest.KillOnCommitLog(t, base, e.name, "kill_at_commit", `NEW.client_commit_id LIKE '%"kill-commit"%' AND nextval('`+e.name+`.kills') % 2 = 1`, true)

	for _, tc := range []struct {
		name, requestID, row string
		cut                  bool
		runs                 int64 // the command function's runs for the first request
	}{
		{"before the COMMIT", "kill-before", "t1", false, 2},
		{"during the COMMIT, not committed", "kill-commit", "t2", false, 2},
		{"after the COMMIT, committed", "cut-after", "t3", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, retries := e.runs.Load(), e.st.Stats().ConnRetries
			e.cut.armed.Store(tc.cut)
			before := e.partitionState().MaxCommitSeq
			r := postOp(t, e.e2eEnv, "worker", createTask(tc.requestID, tc.row))
			e.cut.armed.Store(false)
			if tc.cut && e.cut.cuts.Load() != 1 {
				t.Fatalf("the COMMIT's connection was cut %d times; want 1", e.cut.cuts.Load())
			}
			if r.status != 200 || r.msg["kind"] != "command" || r.msg["status"] != "applied" || r.msg["commitSeq"] != float64(before+1) {
				t.Errorf("command whose connection was lost: HTTP %d %v; want 200, applied at commitSeq %d", r.status, r.msg, before+1)
			}
			if got := e.runs.Load() - runs; got != tc.runs {
				t.Errorf("the command's function ran %d times; want %d", got, tc.runs)
			}
			if n := e.logged(t, cmdCommitID(tc.requestID)); n != 1 {
				t.Errorf("the log holds the command's commit %d times; want 1", n)
			}
			if n := e.st.Stats().ConnRetries - retries; n < 1 {
				t.Errorf("Stats().ConnRetries grew by %d; want at least 1", n)
			}
			again := postOp(t, e.e2eEnv, "worker", createTask(tc.requestID, tc.row))
			if again.status != 200 || again.msg["status"] != "cached" || again.msg["commitSeq"] != float64(before+1) {
				t.Errorf("the retry with the same requestId: HTTP %d %v; want 200, cached at commitSeq %d", again.status, again.msg, before+1)
			}
			if n := e.logged(t, cmdCommitID(tc.requestID)); n != 1 {
				t.Errorf("after the retry the log holds the command's commit %d times; want 1", n)
			}
			if got := e.partitionState().MaxCommitSeq; got != before+1 {
				t.Errorf("maxCommitSeq %d; want %d (one commit)", got, before+1)
			}
		})
	}
}

// TestPostgresMixedBatchCommitCut: a push and a command share one
// group-commit batch, whose COMMIT is carried out and its answer lost.
// Both answer their result at once (the batch runs again: every Write of
// it is keyed in the journal), the log holds each commit once, and the
// command's function ran once.
func TestPostgresMixedBatchCommitCut(t *testing.T) {
	base := pgtest.URL(t)
	t.Parallel()
	// gate is a command whose function waits inside its write batch until
	// released, then fails (its batch rolls back: no COMMIT): the Writes
	// made meanwhile queue and form the next batch together.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := newCmdLossEnv(t, func(c *syncgo.Config) {
		c.Operations.Commands = append(c.Operations.Commands, syncgo.Command{ID: "gate",
			Authorize: func(context.Context, syncgo.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, *syncgo.CommandContext, any) ([]syncgo.Mutation, error) {
				entered <- struct{}{}
				<-release
				return nil, errors.New("the gate fails its batch")
			}})
	})
	seed(t, e.e2eEnv, "alice", "tasks", taskRow("m0", "p1", "zero"))
	// A deferred trigger records the top transaction of each commit (a
	// commit's rows carry its savepoint's subtransaction id instead).
	pgtest.Exec(t, base, `CREATE TABLE `+e.name+`.commit_xids (client_commit_id text, xid bigint)`)
	pgtest.Exec(t, base, `CREATE FUNCTION `+e.name+`.note_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO `+e.name+`.commit_xids VALUES (NEW.client_commit_id, txid_current());
  RETURN NULL;
END $$`)
	pgtest.Exec(t, base, `CREATE CONSTRAINT TRIGGER note_xid AFTER INSERT ON `+e.name+`.sync_commits
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+e.name+`.note_xid()`)
	c := e.client("alice", sspclient.Options{})
	pushID := mustUpsert(t, c, taskRow("m1", "p1", "pushed"))
	before := e.partitionState().MaxCommitSeq
	runs := e.runs.Load()

	var (
		wg      sync.WaitGroup
		res     *sspclient.RoundResult
		pushErr error
		r, g    opResult
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		g = postOp(t, e.e2eEnv, "worker", command("job", "gate", "g1", remotewire.Object{}))
	}()
	<-entered
	go func() {
		defer wg.Done()
		res, pushErr = c.Sync(context.Background())
	}()
	go func() {
		defer wg.Done()
		r = postOp(t, e.e2eEnv, "worker", createTask("mixed", "m2"))
	}()
	time.Sleep(time.Second) // the push and the command queue behind the gate
	e.cut.armed.Store(true)
	close(release)
	wg.Wait()
	e.cut.armed.Store(false)
	if g.msg["code"] != "operation.execution_failed" {
		t.Errorf("the gate: %v; want its failure", g.msg)
	}
	if n := e.cut.cuts.Load(); n != 1 {
		t.Fatalf("the COMMIT's connection was cut %d times; want 1", n)
	}
	// The two commits were one transaction.
	if n := lossQueryInt(t, e.schemaURL, `SELECT count(DISTINCT xid) FROM commit_xids WHERE client_commit_id = ANY($1)`,
		[]string{pushID, cmdCommitID("mixed")}); n != 1 {
		t.Fatalf("the push and the command committed in %d transactions; want 1 (one batch)", n)
	}
	// The command's run again finds the record its first run wrote (its
	// CacheIdentity), so it answers applied; the push's finds a record
	// and answers it cached.
	if r.status != 200 || r.msg["kind"] != "command" || r.msg["status"] != "applied" {
		t.Errorf("command of the cut batch: HTTP %d %v; want 200, applied", r.status, r.msg)
	}
	if pushErr != nil {
		t.Errorf("push of the cut batch: %v; want its result", pushErr)
	} else if o := pushed(t, res, pushID); o.Status != wire.PushApplied && o.Status != wire.PushCached {
		t.Errorf("push of the cut batch: %s; want applied or cached", statusOf(o))
	}
	for _, id := range []string{pushID, cmdCommitID("mixed")} {
		if n := e.logged(t, id); n != 1 {
			t.Errorf("the log holds commit %s %d times; want 1", id, n)
		}
	}
	if got := e.partitionState().MaxCommitSeq; got != before+2 {
		t.Errorf("maxCommitSeq %d; want %d (two commits)", got, before+2)
	}
	if got := e.runs.Load() - runs; got != 1 {
		t.Errorf("the command's function ran %d times; want 1 (its first run committed)", got)
	}
	// The retries of both are answered from the journal.
	again := postOp(t, e.e2eEnv, "worker", createTask("mixed", "m2"))
	if again.msg["status"] != "cached" {
		t.Errorf("the command's retry: %v; want cached", again.msg)
	}
	if got := e.partitionState().MaxCommitSeq; got != before+2 {
		t.Errorf("after the retries maxCommitSeq %d; want %d", got, before+2)
	}
}

// TestPostgresReactionOutcomeAfterConnectionsLost: while a reaction's
// handler runs, every connection of the server's store is terminated (a
// Postgres restart). The handler's success is then recorded on the first
// try (the statement runs again on another connection: the dead one
// answered that the server ended its session, so it did not commit),
// rather than left to the lease's expiry, which would run the handler a
// second time.
func TestPostgresReactionOutcomeAfterConnectionsLost(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	app := "syncgo-rxloss-" + randomHex(t)
	u, err := url.Parse(pgtest.Schema(t, "syncgo_rxloss", false))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	started, release := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int32
	// The runner is woken by the commit; it does not poll, and renews the
	// lease only after 20 s: the completion is the first statement after
	// the termination.
	rc := &syncgo.ReactionConfig{Planner: taskPlanner("mail"), PollInterval: time.Hour, LeaseDuration: time.Minute,
		Handlers: map[string]reaction.Handler{"mail": func(ctx context.Context, dl *reaction.Delivery) error {
			calls.Add(1)
			started <- struct{}{}
			<-release
			return nil
		}}}
	// The commit listener's connection is named apart: it is not
	// terminated, so that its reconnection does not use the pool first.
	lq := u.Query()
	lq.Set("application_name", app+"-listen")
	lu := *u
	lu.RawQuery = lq.Encode()
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: u.String(), ListenURL: lu.String(), MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := reactionServerOn(t, st, rc)
	c := e.client("alice", sspclient.Options{})
	syncQuiet(t, c)
	if o := pushTasks(t, c, "p1", []string{"t1"}, []string{"hello"}); o.Status != wire.PushApplied {
		t.Fatalf("push: %s", statusOf(o))
	}
	<-started
	retries := e.store.Stats().ConnRetries
	if n := terminatePids(t, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app); n == 0 {
		t.Fatal("no backend of the store was terminated")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) == 1 && rs[0].State == store.ReactionCompleted {
			if rs[0].Attempts != 1 {
				t.Errorf("the reaction completed after %d attempts; want 1", rs[0].Attempts)
			}
			break
		}
		if time.Now().After(deadline) {
			var states []store.ReactionState
			for _, r := range rs {
				states = append(states, r.State)
			}
			t.Fatalf("the handler's success was not recorded within 5 s after the connections were lost: states %v", states)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1", n)
	}
	if n := e.store.Stats().ConnRetries - retries; n < 1 {
		t.Errorf("Stats().ConnRetries grew by %d; want at least 1", n)
	}
}
