package syncgo_test

import (
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// presenceOf returns the next message, which must be a presence fanout.
func (s *rtSock) presenceOf() wire.PresenceFanout {
	s.t.Helper()
	ev := s.event()
	f, ok := ev.(wire.PresenceFanout)
	if !ok {
		s.t.Fatalf("%s: got %T %+v, want a presence fanout", s.clientID, ev, ev)
	}
	return f
}

// presenceErr returns the next message, which must be a presence error.
func (s *rtSock) presenceErr() wire.PresenceError {
	s.t.Helper()
	ev := s.event()
	f, ok := ev.(wire.PresenceError)
	if !ok {
		s.t.Fatalf("%s: got %T %+v, want a presence error", s.clientID, ev, ev)
	}
	return f
}

func wantPresence(t *testing.T, f wire.PresenceFanout, kind wire.PresenceKind, actor, client, doc string) {
	t.Helper()
	if f.ScopeKey != "project:p1" || f.Kind != kind || f.ActorID != actor || f.ClientID != client || string(f.Doc) != doc {
		t.Fatalf("presence %+v (doc %s), want %v of %s/%s with doc %s", f, f.Doc, kind, actor, client, doc)
	}
}

// TestRealtimePresence runs the §8.6.5 scenarios: the full lifecycle of
// two scope-mates, the late joiner's snapshot, cross-scope isolation and
// the size cap.
func TestRealtimePresence(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.Realtime.MaxPresenceBytes = 1024 })
	for _, c := range []struct{ actor, client, project string }{
		{"alice", "a1", "p1"}, {"bob", "b1", "p1"}, {"carol", "c1", "p1"}, {"dave", "d1", "p2"},
	} {
		e.peer(c.actor, c.client).pull(rtSub("s", -1, c.project))
	}
	a := e.dial("alice", "a1")
	b := e.dial("bob", "b1")
	d := e.dial("dave", "d1")
	for _, s := range []*rtSock{a, b, d} {
		s.hello()
	}

	// Lifecycle: join, update, leave by doc null.
	a.publish("project:p1", map[string]any{"cursor": 1})
	wantPresence(t, b.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"cursor":1}`)
	a.publish("project:p1", map[string]any{"cursor": 2})
	wantPresence(t, b.presenceOf(), wire.PresenceUpdate, "alice", "a1", `{"cursor":2}`)
	a.publish("project:p1", nil)
	wantPresence(t, b.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	a.barrier() // the publisher heard none of its own fanout

	// A late joiner gets the snapshot join-burst.
	a.publish("project:p1", map[string]any{"cursor": 3})
	wantPresence(t, b.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"cursor":3}`)
	b.publish("project:p1", map[string]any{"who": "bob"})
	wantPresence(t, a.presenceOf(), wire.PresenceJoin, "bob", "b1", `{"who":"bob"}`)
	c := e.dial("carol", "c1")
	c.hello()
	burst := map[string]string{}
	for range 2 {
		f := c.presenceOf()
		if f.Kind != wire.PresenceJoin || f.ScopeKey != "project:p1" {
			t.Fatalf("snapshot %+v, want joins", f)
		}
		burst[f.ClientID] = string(f.Doc)
	}
	if burst["a1"] != `{"cursor":3}` || burst["b1"] != `{"who":"bob"}` {
		t.Fatalf("snapshot burst %v", burst)
	}

	// Cross-scope isolation: D (p2) cannot publish onto p1, and p1's
	// traffic never reaches D.
	d.publish("project:p1", map[string]any{"spy": true})
	if pe := d.presenceErr(); pe.Code != wire.PresenceForbidden || pe.ScopeKey != "project:p1" {
		t.Fatalf("D's publish on p1: %+v, want presence.forbidden", pe)
	}
	d.publish("project:p2", map[string]any{"d": 1}) // D's own scope: nobody on p1 hears it
	a.publish("project:p1", map[string]any{"cursor": 4})
	wantPresence(t, b.presenceOf(), wire.PresenceUpdate, "alice", "a1", `{"cursor":4}`)
	wantPresence(t, c.presenceOf(), wire.PresenceUpdate, "alice", "a1", `{"cursor":4}`)
	a.publish("project:p2", map[string]any{"spy": true})
	if pe := a.presenceErr(); pe.Code != wire.PresenceForbidden || pe.ScopeKey != "project:p2" {
		t.Fatalf("A's publish on p2: %+v, want presence.forbidden", pe)
	}

	// Size cap: rejected to the publisher only, state unchanged.
	a.publish("project:p1", map[string]any{"blob": strings.Repeat("x", 2000)})
	if pe := a.presenceErr(); pe.Code != wire.PresenceTooLarge || pe.ScopeKey != "project:p1" {
		t.Fatalf("over-cap publish: %+v, want presence.too_large", pe)
	}

	// Disconnect implies leave, to the scope-mates only.
	_ = a.nc.Close()
	wantPresence(t, b.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	wantPresence(t, c.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	// D heard nothing of p1: its next message is its own barrier answer.
	d.barrier()
	// B and C heard nothing of the rejected publish nor of D's p2 doc.
	b.barrier()
	c.barrier()
}

// TestRealtimePresenceFollowsRegistration: a socket round that drops a
// scope leaves the presence published there and stops delivering it; a
// round that adds one delivers the snapshot.
func TestRealtimePresenceFollowsRegistration(t *testing.T) {
	e := newRTEnv(t)
	ap := e.peer("alice", "a1")
	ap.pull(rtSub("s", -1, "p1"))
	e.peer("bob", "b1").pull(rtSub("s", -1, "p1"))
	e.peer("carol", "c1").pull(rtSub("s", -1, "p2"))
	a := e.dial("alice", "a1")
	b := e.dial("bob", "b1")
	c := e.dial("carol", "c1")
	for _, s := range []*rtSock{a, b, c} {
		s.hello()
	}
	a.publish("project:p1", map[string]any{"x": 1})
	wantPresence(t, b.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"x":1}`)
	c.publish("project:p2", map[string]any{"c": 1})
	c.barrier()

	// A's round moves it from p1 to p2.
	a.round(ap, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s", -1, "p2")}})
	wantPresence(t, b.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	f := a.presenceOf()
	if f.Kind != wire.PresenceJoin || f.ScopeKey != "project:p2" || f.ClientID != "c1" {
		t.Fatalf("snapshot after the round %+v, want carol's join on p2", f)
	}
	b.publish("project:p1", map[string]any{"b": 1})
	b.barrier()
	a.barrier() // bob's p1 presence no longer reaches A
}

// TestRealtimePresenceSurvivesARound: a round that re-registers the same
// scope leaves presence untouched, both ways (§8.6.5).
func TestRealtimePresenceSurvivesARound(t *testing.T) {
	e := newRTEnv(t)
	ap := e.peer("alice", "a1")
	cur := ap.pull(rtSub("s", -1, "p1"))["s"]
	e.peer("bob", "b1").pull(rtSub("s", -1, "p1"))
	e.peer("carol", "c1").pull(rtSub("s", -1, "p1"))
	a := e.dial("alice", "a1")
	b := e.dial("bob", "b1")
	a.hello()
	b.hello()
	a.publish("project:p1", map[string]any{"a": 1})
	wantPresence(t, b.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"a":1}`)
	b.publish("project:p1", map[string]any{"b": 1})
	wantPresence(t, a.presenceOf(), wire.PresenceJoin, "bob", "b1", `{"b":1}`)

	m := a.round(ap, &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c1", rtTask{id: "ta", project: "p1"})},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: []*wire.Subscription{rtSub("s", cur, "p1")}})
	rtPushed(t, m)
	// No leave, no re-join on either side; the commit itself may reach
	// them as a delta or a wake.
	b.barrierSkippingData()
	a.barrierSkippingData()
	c := e.dial("carol", "c1")
	c.hello()
	got := map[string]bool{}
	for range 2 {
		f := c.presenceOf()
		got[f.ClientID] = f.Kind == wire.PresenceJoin
	}
	if !got["a1"] || !got["b1"] {
		t.Fatalf("snapshot after the round %v, want joins of a1 and b1", got)
	}
}

// barrierSkippingData is barrier for a socket that may also receive deltas
// and wakes meanwhile; any other event fails.
func (s *rtSock) barrierSkippingData() {
	s.t.Helper()
	s.publish("barrier:x", map[string]any{})
	for {
		m := s.next(rtWait)
		if m.op != ws.OpText {
			continue
		}
		ev := s.eventOf(m)
		if pe, ok := ev.(wire.PresenceError); ok && pe.ScopeKey == "barrier:x" {
			return
		}
		if _, ok := ev.(wire.Wake); !ok {
			s.t.Fatalf("%s: %T %+v while waiting for the barrier", s.clientID, ev, ev)
		}
	}
}

// A client that connects again while its old socket is still open is the
// same peer (§8.6.1, identity is (actorId, clientId)): its new socket is
// not shown its own document, its publish replaces the document (update,
// not a second join), the old socket's close says no leave, and a late
// joiner sees it once, with the newest document.
func TestRealtimePresenceSameClientReconnect(t *testing.T) {
	e := newRTEnv(t)
	for _, c := range []struct{ actor, client string }{{"alice", "a1"}, {"bob", "b1"}, {"carol", "c1"}} {
		e.peer(c.actor, c.client).pull(rtSub("s", -1, "p1"))
	}
	b := e.dial("bob", "b1")
	b.hello()
	old := e.dial("alice", "a1")
	old.hello()
	old.publish("project:p1", map[string]any{"v": 1})
	wantPresence(t, b.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"v":1}`)

	fresh := e.dial("alice", "a1")
	fresh.hello()
	fresh.barrier() // no join of its own document
	fresh.publish("project:p1", map[string]any{"v": 2})
	wantPresence(t, b.presenceOf(), wire.PresenceUpdate, "alice", "a1", `{"v":2}`)
	old.barrier() // the same peer's other socket hears none of it

	_ = old.nc.Close()
	eventually(t, "the old socket's session ended", func() bool { return e.srv.RealtimeStats().Sessions == 2 })
	b.barrier() // no leave: alice/a1 is still present
	c := e.dial("carol", "c1")
	c.hello()
	wantPresence(t, c.presenceOf(), wire.PresenceJoin, "alice", "a1", `{"v":2}`)
	c.barrier()

	fresh.publish("project:p1", nil)
	wantPresence(t, b.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	wantPresence(t, c.presenceOf(), wire.PresenceLeave, "alice", "a1", "")
	b.barrier()
}
