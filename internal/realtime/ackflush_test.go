package realtime

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
)

// TestFlushAcksPersistsEverySession: a flush writes the acks of many
// sessions in batches (SQLite); every session's acknowledged cursor is
// stored, a record whose stored cursor is already ahead keeps it, an ack
// of another log epoch is not written (the others are), and a second
// flush with no new ack writes nothing.
func TestFlushAcksPersistsEverySession(t *testing.T) {
	ctx := context.Background()
	st, sc := testStore(t)
	// No flush of the hub's own while the test runs.
	h := NewHub(Config{Engine: engine.New(engine.Config{Store: st, Schema: sc}), Store: st,
		WriteTimeout: time.Second, AckFlush: time.Hour})
	t.Cleanup(h.Close)
	part, err := st.TouchPartition(ctx, "p", 1000, "e")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1200 // over two batches
	p := h.part("p", true)
	want := map[string]int64{}
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		stored := int64(5)
		if i%50 == 0 {
			stored = 10_000 // ahead of the ack: kept
		}
		if err := st.PutClient(ctx, "p", store.ClientRecord{ClientID: id, ActorID: "a", WireVersion: 3,
			Cursor: stored, UpdatedAtMs: 1000}); err != nil {
			t.Fatal(err)
		}
		server, client := net.Pipe()
		t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
		epoch := part.LogEpoch
		if i%70 == 0 {
			epoch = "old"
		}
		s := &session{hub: h, part: p, conn: newConn(server, 16, 1<<20, time.Second, &h.stats.closedSlow),
			auth: engine.Auth{ActorID: "a", Partition: "p"}, clientID: id, epoch: epoch}
		p.mu.Lock()
		p.addLocked(s)
		p.mu.Unlock()
		ack := int64(100 + i)
		s.ack(ack - 1)
		s.ack(ack)
		want[id] = max(ack, stored)
		if epoch != part.LogEpoch {
			want[id] = stored
		}
	}
	h.flushAcks(false)
	for id, cursor := range want {
		rec, err := st.Client(ctx, "p", id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Cursor != cursor {
			t.Errorf("client %s cursor %d, want %d", id, rec.Cursor, cursor)
		}
	}
	before := st.Stats()
	h.flushAcks(false)
	if after := st.Stats(); after != before {
		t.Errorf("a flush with no new ack wrote: stats %+v, then %+v", before, after)
	}
}

// TestFlushAcksSpreadsOverStripes: with more sessions holding an ack
// than a flush takes (AckFlushAcks), each flush persists one stripe of
// them: every stripe is a part of the sessions, the stripes of
// consecutive flushes are disjoint, and after AckFlushSpread flushes every
// session's latest ack is persisted. The hub's closing flush persists
// every session's ack at once.
func TestFlushAcksSpreadsOverStripes(t *testing.T) {
	ctx := context.Background()
	st, sc := testStore(t)
	const n, spread = 600, 4
	h := NewHub(Config{Engine: engine.New(engine.Config{Store: st, Schema: sc}), Store: st,
		WriteTimeout: time.Second, AckFlush: time.Hour, AckFlushAcks: 100, AckFlushSpread: spread})
	t.Cleanup(h.Close)
	part, err := st.TouchPartition(ctx, "p", 1000, "e")
	if err != nil {
		t.Fatal(err)
	}
	p := h.part("p", true)
	sessions := make([]*session, n)
	for i := range n {
		id := fmt.Sprintf("c%03d", i)
		if err := st.PutClient(ctx, "p", store.ClientRecord{ClientID: id, ActorID: "a", WireVersion: 3,
			Cursor: 1, UpdatedAtMs: 1000}); err != nil {
			t.Fatal(err)
		}
		server, client := net.Pipe()
		t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
		s := &session{hub: h, part: p, conn: newConn(server, 16, 1<<20, time.Second, &h.stats.closedSlow),
			auth: engine.Auth{ActorID: "a", Partition: "p"}, clientID: id, epoch: part.LogEpoch}
		p.mu.Lock()
		p.addLocked(s)
		p.mu.Unlock()
		sessions[i] = s
	}
	stored := func(cursor int64) (at int) {
		for i := range n {
			rec, err := st.Client(ctx, "p", fmt.Sprintf("c%03d", i))
			if err != nil {
				t.Fatal(err)
			}
			if rec.Cursor >= cursor {
				at++
			}
		}
		return at
	}
	ackAll := func(cursor int64) {
		for _, s := range sessions {
			s.ack(cursor)
		}
	}
	// The first flush sees no stripes yet: every ack, then 600 waiting
	// acks make 6 stripes, capped at 4.
	ackAll(10)
	h.flushAcks(false)
	if got := stored(10); got != n {
		t.Fatalf("first flush persisted %d acks, want %d", got, n)
	}
	ackAll(20)
	prev := 0
	for f := 1; f <= spread; f++ {
		h.flushAcks(false)
		got := stored(20)
		if got == prev || (f < spread && got == n) {
			t.Fatalf("flush %d of %d: %d sessions' acks persisted in all (%d before): want a stripe, a part of them", f, spread, got, prev)
		}
		prev = got
	}
	if prev != n {
		t.Fatalf("after %d flushes %d of %d acks persisted", spread, prev, n)
	}
	// Every session has an ack again: the closing flush takes them all.
	ackAll(30)
	h.flushAcks(true)
	if got := stored(30); got != n {
		t.Fatalf("the closing flush persisted %d acks, want %d", got, n)
	}
}

// TestOnResolveReachesTheClientsSockets: a resolution of a client's
// scopes narrows the sockets of that client (and actor) only, found by
// the partition's clientId index, which follows sessions leaving.
func TestOnResolveReachesTheClientsSockets(t *testing.T) {
	h := testHub(t)
	c1, _ := testSession(t, h, "p1", "p2")
	c2, _ := testSession(t, h, "p1", "p2")
	other, _ := testSession(t, h, "p1", "p2")
	p := h.part("p", false)
	p.mu.Lock()
	p.removeLocked(other)
	other.clientID = "d"
	p.addLocked(other)
	p.removeLocked(c2) // gone: not narrowed
	p.mu.Unlock()
	applied := time.Now()
	h.OnResolve(context.Background(), engine.Auth{ActorID: "a", Partition: "p"}, "c",
		map[string][]string{"project_id": {"p1"}}, true, applied)
	values := func(s *session) []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.regs) != 1 || len(s.regs[0].effective) != 1 {
			t.Fatalf("registrations %+v", s.regs)
		}
		return s.regs[0].effective[0].Values
	}
	if got := values(c1); len(got) != 1 || got[0] != "p1" {
		t.Errorf("client c's socket registered on %v, want [p1]", got)
	}
	for name, s := range map[string]*session{"client d's socket": other, "a socket that left": c2} {
		if got := values(s); len(got) != 2 {
			t.Errorf("%s registered on %v, want both projects still", name, got)
		}
	}
	if n := h.Stats().Narrowed; n != 1 {
		t.Errorf("narrowed %d sockets, want 1", n)
	}
	// A resolution begun before the one applied is stale: it does not
	// replace the grant that rounds and starts narrow to.
	h.OnResolve(context.Background(), engine.Auth{ActorID: "a", Partition: "p"}, "c",
		map[string][]string{"project_id": {"p1", "p2"}}, true, applied.Add(-time.Millisecond))
	c1.mu.Lock()
	g := c1.grant
	c1.mu.Unlock()
	if g == nil || len(g.allowed["project_id"]) != 1 || !g.started.Equal(applied) {
		t.Errorf("after a stale resolution the grant is %+v, want the one begun at %v", g, applied)
	}
	h.OnResolve(context.Background(), engine.Auth{ActorID: "a", Partition: "p"}, "c",
		map[string][]string{"project_id": {"p1", "p2"}}, true, applied.Add(time.Millisecond))
	c1.mu.Lock()
	g = c1.grant
	c1.mu.Unlock()
	if g == nil || len(g.allowed["project_id"]) != 2 {
		t.Errorf("a later resolution was not applied: %+v", g)
	}
}

// TestHeartbeatOnlyToQuietSockets: a socket sent other frames more often
// than half the heartbeat interval hears no heartbeat (§8.5: any frame
// counts), while an idle socket beside it hears one every interval.
func TestHeartbeatOnlyToQuietSockets(t *testing.T) {
	const beat = 250 * time.Millisecond
	e := newRaceEnv(t, func(c *Config) { c.Heartbeat = beat })
	busy := e.attach()
	busySession := e.only()
	idle := e.attach()
	if m := busy.next(); !isHello(m) {
		t.Fatalf("busy socket's first message %q, want hello", m.data)
	}
	if m := idle.next(); !isHello(m) {
		t.Fatalf("idle socket's first message %q, want hello", m.data)
	}
	probe := textFrame([]byte(`{"event":"probe","data":{}}`))
	const span = 8 * beat
	for end := time.Now().Add(span); time.Now().Before(end); {
		if err := busySession.conn.send(probe); err != nil {
			t.Fatal(err)
		}
		time.Sleep(beat / 20)
	}
	// count counts the heartbeats and probes a socket heard, and the
	// heartbeats between its first and its last probe.
	count := func(c *raceClient) (beats, inside, probes int) {
		between := 0
		for {
			select {
			case m := <-c.in:
				switch {
				case strings.Contains(string(m.data), `"event":"heartbeat"`):
					beats++
					if probes > 0 {
						between++
					}
				case strings.Contains(string(m.data), `"event":"probe"`):
					probes++
					inside += between
					between = 0
				}
			case <-time.After(100 * time.Millisecond):
				return beats, inside, probes
			}
		}
	}
	if _, inside, probes := count(busy); inside != 0 || probes < 20 {
		t.Errorf("busy socket: %d heartbeats between %d other frames, want none and at least 20 frames", inside, probes)
	}
	// 8 expected; one every other interval would be 4.
	if beats, _, _ := count(idle); beats < 6 {
		t.Errorf("idle socket: %d heartbeats in %v, want one per %v", beats, span, beat)
	}
}
