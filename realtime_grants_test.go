package syncgo_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Deltas never outlive the grant (finding 2 of issue 15): once the host's
// resolver stops granting a scope, an open socket of the actor receives no
// more rows of it, after the client's own HTTP round, after RevokeActor
// (on every process sharing the database) and after the periodic
// re-resolution; it gets a catch-up wake-up instead, and its other
// registrations keep delivering.

// rtGrants is a resolver whose grants a test changes: actor → projects
// (absent: every project; nil: the resolver fails).
type rtGrants struct {
	mu     sync.Mutex
	grants map[string][]string
}

func (g *rtGrants) set(actor string, projects ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.grants == nil {
		g.grants = map[string][]string{}
	}
	g.grants[actor] = projects
}

func (g *rtGrants) resolve(_ context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.grants[req.ActorID]
	switch {
	case !ok:
		return map[string][]string{"project_id": {"*"}}, nil
	case p == nil:
		return nil, errors.New("resolver outage")
	}
	return map[string][]string{"project_id": slices.Clone(p)}, nil
}

// newGrantEnv starts a server on st whose resolver is g.
func newGrantEnv(t *testing.T, st store.Store, g *rtGrants, tweak ...func(*syncgo.Config)) *rtEnv {
	t.Helper()
	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	cfg := syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: g.resolve,
		RetentionInterval: -1}
	return e.start(cfg, tweak...)
}

// grantSetup subscribes alice's client a1 to p1 (s1) and p2 (s2) over
// HTTP on e, opens its socket there, and proves that a p2 commit pushed
// by bob through pusher arrives as a delta while granted. It returns the
// socket and the commit's sequence.
func grantSetup(t *testing.T, e, pusher *rtEnv) (*rtSock, int64) {
	t.Helper()
	e.peer("alice", "a1").pull(rtSub("s1", -1, "p1"), rtSub("s2", -1, "p2"))
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync {
		t.Fatalf("hello %+v: the registrations did not load", h)
	}
	seq := pusher.peer("bob", "b1").push("c0", rtTask{id: "x0", project: "p2"})
	if rows, _ := rtDeltaRows(s.delta()); !slices.Equal(rows, []string{"x0"}) {
		t.Fatalf("delta rows %v while p2 is granted; want [x0]", rows)
	}
	return s, seq
}

// wantRevokedFlow checks what follows a narrowing: a catch-up wake, and
// once the client acknowledged, a p2 commit sends nothing while the next
// p1 commit arrives as a delta of s1 alone.
func wantRevokedFlow(t *testing.T, s *rtSock, pusher *rtEnv, observed int64) {
	t.Helper()
	if w := s.wake(); w.Reason != wire.WakeCatchupRequired {
		t.Fatalf("wake %+v; want catchup-required", w)
	}
	s.ack(observed)
	s.barrier()
	bob := pusher.peer("bob", "b2")
	bob.push("c-p2", rtTask{id: "x-p2", project: "p2"})
	p1 := bob.push("c-p1", rtTask{id: "x-p1", project: "p1"})
	m := s.delta()
	rows, next := rtDeltaRows(m)
	if !slices.Equal(rows, []string{"x-p1"}) || len(next) != 1 || next["s1"] != p1 {
		t.Fatalf("delta rows %v, cursors %v after p2 was revoked; want only x-p1 on s1 at %d", rows, next, p1)
	}
}

// The client's own HTTP round resolves fewer scopes: its pull answers s2
// revoked, and its socket stops delivering p2 at once.
func TestRealtimeGrantNarrowedByHTTPRound(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		g := &rtGrants{}
		g.set("alice", "p1", "p2")
		e := newGrantEnv(t, d.open(t), g)
		s, seq := grantSetup(t, e, e)
		g.set("alice", "p1")
		alice := e.peer("alice", "a1")
		alice.acquireEpoch()
		m := alice.post(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", seq, "p1"), rtSub("s2", seq, "p2")}})
		status := map[string]wire.SubStatus{}
		for _, f := range m.Frames {
			if st, ok := f.(*wire.SubStart); ok {
				status[st.ID] = st.Status
			}
		}
		if status["s1"] != wire.SubActive || status["s2"] != wire.SubRevoked {
			t.Fatalf("pull statuses %v; want s1 active, s2 revoked", status)
		}
		wantRevokedFlow(t, s, e, seq)
		if st := e.srv.RealtimeStats(); st.Narrowed < 1 {
			t.Fatalf("stats %+v: no narrowing counted", st)
		}
	})
}

// The host revokes without any request of the client: RevokeActor
// narrows the socket; a failing resolver then drops every registration.
func TestRealtimeRevokeActor(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		g := &rtGrants{}
		g.set("alice", "p1", "p2")
		e := newGrantEnv(t, d.open(t), g)
		s, seq := grantSetup(t, e, e)
		g.set("alice", "p1")
		if err := e.srv.RevokeActor(context.Background(), rtPartition, "alice"); err != nil {
			t.Fatal(err)
		}
		wantRevokedFlow(t, s, e, seq)

		// Fail closed: a resolver outage drops the remaining registration.
		g.mu.Lock()
		g.grants["alice"] = nil
		g.mu.Unlock()
		if err := e.srv.RevokeActor(context.Background(), rtPartition, "alice"); err != nil {
			t.Fatal(err)
		}
		w := s.wake()
		s.ack(w.Cursor)
		s.barrier()
		e.peer("bob", "b3").push("c-after", rtTask{id: "x-after", project: "p1"})
		s.barrier()
		if m, ok := s.tryNext(100 * time.Millisecond); ok {
			t.Fatalf("after the resolver failed the socket got %v; want nothing", m)
		}
	})
}

// With no request and no RevokeActor, the periodic re-resolution narrows
// the socket.
func TestRealtimeGrantReresolvedOnInterval(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		g := &rtGrants{}
		g.set("alice", "p1", "p2")
		e := newGrantEnv(t, d.open(t), g, func(c *syncgo.Config) { c.Realtime.ReresolveInterval = 20 * time.Millisecond })
		s, seq := grantSetup(t, e, e)
		g.set("alice", "p1")
		wantRevokedFlow(t, s, e, seq)
	})
}

// twoPostgresStores opens two stores (each with its own pool and LISTEN
// connection) on one fresh Postgres schema, for two server instances; the
// test runs in parallel.
func twoPostgresStores(t *testing.T) (first, second store.Store) {
	t.Helper()
	base := pgtest.URL(t)
	t.Parallel()
	first = openPostgres(t)
	var schemaName string
	if err := first.(*pgstore.Store).Pool().QueryRow(context.Background(), "SELECT current_schema()").Scan(&schemaName); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.WithSearchPath(t, base, schemaName), MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return first, s
}

// Two server instances on one Postgres database, each with its own pool
// and LISTEN connection: RevokeActor on the first narrows the socket that
// the second holds (the grant notification crosses the database).
func TestRealtimeRevokeActorAcrossInstances(t *testing.T) {
	first, second := twoPostgresStores(t)

	g := &rtGrants{}
	g.set("alice", "p1", "p2")
	e1 := newGrantEnv(t, first, g)
	e2 := newGrantEnv(t, second, g)
	s, seq := grantSetup(t, e2, e1) // socket on the second, pushes to the first
	g.set("alice", "p1")
	if err := e1.srv.RevokeActor(context.Background(), rtPartition, "alice"); err != nil {
		t.Fatal(err)
	}
	wantRevokedFlow(t, s, e1, seq)
	if st := e2.srv.RealtimeStats(); st.Narrowed < 1 {
		t.Fatalf("second instance stats %+v: no narrowing counted", st)
	}
}
