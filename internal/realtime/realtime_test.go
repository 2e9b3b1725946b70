package realtime

import (
	"bufio"
	"context"
	"math/rand/v2"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestStreamScannerFindsEND(t *testing.T) {
	req := &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}}
	b, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		stream := append(append([]byte(nil), b...), make([]byte, rng.IntN(3))...)
		sc := newStreamScanner()
		for rest := stream; len(rest) > 0; {
			n := 1 + rng.IntN(len(rest))
			sc.feed(rest[:n])
			rest = rest[n:]
		}
		if !sc.ended || sc.past != len(stream)-len(b) {
			t.Fatalf("ended %v past %d, want true %d", sc.ended, sc.past, len(stream)-len(b))
		}
	}
	sc := newStreamScanner()
	sc.feed(b[:len(b)-1])
	if sc.ended {
		t.Fatal("ended before the last byte of END")
	}
}

// testHub is a hub over a real engine and sqlite store, for unit tests
// that drive sessions directly.
func testHub(t *testing.T) *Hub {
	t.Helper()
	st, sc := testStore(t)
	eng := engine.New(engine.Config{Store: st, Schema: sc})
	h := NewHub(Config{Engine: eng, Store: st, WriteTimeout: time.Second})
	t.Cleanup(h.Close)
	return h
}

// testStore is a sqlite store in a temporary file and the tasks schema
// (tasks scoped by project_id) the unit tests use.
func testStore(t *testing.T) (*sqlitestore.Store, *schema.Compiled) {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "u.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sc, err := schema.New(1).Table("tasks", "id", schema.String("id"), schema.String("project_id")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	return st, sc
}

// testSession attaches a session on a net.Pipe, registered on projects,
// and returns it with the client end.
func testSession(t *testing.T, h *Hub, projects ...string) (*session, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	p := h.part("p", true)
	s := &session{hub: h, part: p, conn: newConn(server, 16, 1<<20, time.Second, &h.stats.closedSlow),
		auth: engine.Auth{ActorID: "a", Partition: "p"}, clientID: "c"}
	rs := h.newRegSet([]registration{{id: "s", table: "tasks",
		effective: wire.ScopeMap{{Key: "project_id", Values: projects}}}}, wire.Version3, "e")
	p.mu.Lock()
	s.mu.Lock()
	p.addLocked(s)
	s.installLocked(rs)
	s.mu.Unlock()
	p.mu.Unlock()
	return s, client
}

func notice(seq int64, project string) engine.CommitNotice {
	return engine.CommitNotice{Partition: "p", Seq: seq, Changes: []store.Change{{Table: "tasks", RowID: "r",
		Op: wire.OpUpsert, RowVersion: 1, Scopes: wire.StoredScopes{{Key: "project_id", Value: project}}}}}
}

// readText reads one server frame from the client end of a pipe.
func readFrame(t *testing.T, c net.Conn) ws.Frame {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := ws.ReadFrame(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRoundMissedCommitWakes: a commit observed during a round that the
// old registrations did not match, but the round's new ones do, wakes the
// session at round end (the round's pull may have read the log before it);
// one that matches neither does not.
func TestRoundMissedCommitWakes(t *testing.T) {
	h := testHub(t)
	s, client := testSession(t, h, "p1")
	s.observed = 0
	s.roundActive = true
	s.deliver(notice(1, "p2"), &deltaCaches{})
	s.deliver(notice(2, "p3"), &deltaCaches{})
	rs := h.newRegSet([]registration{{id: "s", table: "tasks",
		effective: wire.ScopeMap{{Key: "project_id", Values: []string{"p2"}}}}}, wire.Version3, "e")
	p := s.part
	p.mu.Lock()
	s.mu.Lock()
	s.installLocked(rs)
	s.roundActive = false
	s.checkRoundMissedLocked()
	suppressed := s.suppressed
	s.mu.Unlock()
	p.mu.Unlock()
	if !suppressed {
		t.Fatal("the session is not suppressed after a missed commit")
	}
	f := readFrame(t, client)
	if !strings.Contains(string(f.Payload), `"reason":"catchup-required"`) || !strings.Contains(string(f.Payload), `"cursor":2`) {
		t.Fatalf("got %s, want a catch-up wake at 2", f.Payload)
	}

	// Registered on p1 again: a round whose missed commits match nothing.
	s2, _ := testSession(t, h, "p1")
	s2.observed = 2
	s2.roundActive = true
	s2.deliver(notice(3, "p3"), &deltaCaches{})
	s2.mu.Lock()
	s2.roundActive = false
	s2.checkRoundMissedLocked()
	suppressed = s2.suppressed
	s2.mu.Unlock()
	if suppressed {
		t.Fatal("suppressed without a missed commit")
	}
}

// TestGapWakesEvenWhenNotMatching: a non-adjacent notification wakes the
// session whatever its scopes (§8.2): the missing one may have matched.
func TestGapWakesEvenWhenNotMatching(t *testing.T) {
	h := testHub(t)
	s, client := testSession(t, h, "p1")
	s.observed = 1
	s.deliver(notice(3, "p9"), &deltaCaches{})
	f := readFrame(t, client)
	if !strings.Contains(string(f.Payload), `"catchup-required"`) {
		t.Fatalf("got %s, want a wake", f.Payload)
	}
}

// TestQueueCoalescesWakes: a wake replaces a queued one, so a consumer
// that does not read holds at most one wake however many commits pass.
func TestQueueCoalescesWakes(t *testing.T) {
	server, client := net.Pipe() // unbuffered: the flusher blocks until read
	defer client.Close()
	c := newConn(server, 4, 1<<20, 5*time.Second, nil)
	if err := c.send(textFrame([]byte("first"))); err != nil { // taken by the flusher, which blocks
		t.Fatal(err)
	}
	for taken := false; !taken; {
		c.mu.Lock()
		taken = len(c.queue) == 0
		c.mu.Unlock()
		runtime.Gosched()
	}
	for i := range 50 {
		w := textFrame([]byte("wake" + string(rune('a'+i%26))))
		w.prio = prioWake
		if err := c.send(w); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
	}
	if err := c.send(textFrame([]byte("data"))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(client)
	var got []string
	for range 3 {
		f, err := ws.ReadFrame(br)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(f.Payload))
	}
	if got[0] != "first" || !strings.HasPrefix(got[1], "wake") || got[2] != "data" {
		t.Fatalf("got %q, want first, one wake, data", got)
	}
	if got[1] != "wake"+string(rune('a'+49%26)) {
		t.Fatalf("the queued wake is %q, want the latest", got[1])
	}
}

// TestCloseFrameIsWrittenAndEndsTheStream: closeWith drops queued data,
// writes the close frame, then ends the stream.
func TestCloseFrameIsWrittenAndEndsTheStream(t *testing.T) {
	cl, sv := tcpPair(t)
	c := newConn(sv, 16, 1<<20, time.Second, nil)
	_ = c.send(textFrame([]byte("hello")))
	c.closeWith(ws.StatusGoingAway, "bye")
	if err := c.send(textFrame([]byte("late"))); err == nil {
		t.Fatal("a frame was accepted after the close frame")
	}
	br := bufio.NewReader(cl)
	for {
		f, err := ws.ReadFrame(br)
		if err != nil {
			t.Fatalf("no close frame: %v", err)
		}
		if f.Header.OpCode == ws.OpClose {
			code, reason := ws.ParseCloseFrameData(f.Payload)
			if code != ws.StatusGoingAway || reason != "bye" {
				t.Fatalf("close %d %q", code, reason)
			}
			break
		}
		if string(f.Payload) != "hello" {
			t.Fatalf("unexpected frame %q", f.Payload)
		}
	}
	select {
	case <-c.sentC():
	case <-time.After(5 * time.Second):
		t.Fatal("sent not signalled")
	}
	_ = cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("bytes after the close frame")
	}
}

// tcpPair returns the two ends of a loopback TCP connection, client and
// server, both closed when the test ends.
func tcpPair(t testing.TB) (cl, sv net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if cl, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	if sv, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sv.Close() })
	return cl, sv
}
