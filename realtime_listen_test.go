package syncgo_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

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
// ResolveScopes is resolve, when set, and otherwise each one's own.
func rtPostgresPair(t *testing.T, resolve func(b *rtEnv) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error)) (a, b *rtEnv) {
	t.Helper()
	db := pgtest.Schema(t, "syncgo_rt_fleet", false)
	envs := make([]*rtEnv, 2)
	for i := range envs {
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: db, MaxConns: 4})
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
	a, b := rtPostgresPair(t, func(e *rtEnv) func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
		return func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
			if req.ClientID == "c1" {
				select {
				case entered <- struct{}{}:
				default:
				}
			}
			return e.resolve(ctx, req)
		}
	})

	// A started socket on partition q of b: its deltas show how far b's
	// listener has got (it handles notifications one at a time, in order).
	b.peer("q-bob", "cq").pull(rtSub("s", -1, "p1"))
	sockQ := b.dial("q-bob", "cq")
	sockQ.hello()
	qWriter := a.peer("q-bob", "wq")
	qWriter.push("q-warm", rtTask{"qw", "p1", "warm", ""})
	sockQ.delta()

	// c1 is subscribed on b and current; its socket's start waits in
	// ResolveScopes, after it read the partition.
	b.peer("alice", "c1").pull(rtSub("s", -1, "p1"))
	select {
	case <-entered:
	default:
	}
	release := b.gate("c1")
	defer release()
	sock := b.dial("alice", "c1")
	select {
	case <-entered:
	case <-time.After(rtWait):
		t.Fatal("the socket's start never called ResolveScopes")
	}

	// a appends a commit c1 subscribes to, then one of partition q: once
	// q's delta arrives, b's listener has handled the first.
	seq := a.peer("alice", "w1").push("x", rtTask{"t1", "p1", "one", ""})
	qWriter.push("q-after", rtTask{"qa", "p1", "after", ""})
	sockQ.delta()

	release()
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
