package realtime

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/wire"
)

// TestParkedSocketDeliversAndReads: an idle socket parked in the poller
// (no reader goroutine, its read buffer returned) gets a delta written,
// its client's ack wakes a reader that records it, and the socket parks
// again; the client's close ends the session. The same flow with a
// reader goroutine per socket (ReaderPerSocket) for comparison.
func TestParkedSocketDeliversAndReads(t *testing.T) {
	for _, perSocket := range []bool{false, true} {
		name := "polled"
		if perSocket {
			name = "reader-per-socket"
		}
		t.Run(name, func(t *testing.T) {
			e := newRaceEnv(t, func(c *Config) { c.ReaderPerSocket = perSocket })
			polled := !perSocket && runtime.GOOS == "linux"
			if (e.hub.poll != nil) != polled {
				t.Fatalf("poller %v, want %v", e.hub.poll != nil, polled)
			}
			e.pushAs("b", "cb", "b0", "t0", "p1")
			c := e.attach()
			if m := c.next(); m.op != ws.OpText || !isHello(m) {
				t.Fatalf("first message %q, want hello", m.data)
			}
			for _, s := range e.hub.allSessions() {
				// A polled TCP socket is the hub's (fdConn): only its
				// poller watches it.
				if adopted := s.conn.fc != nil; adopted != polled {
					t.Fatalf("socket adopted %v, want %v", adopted, polled)
				}
			}
			c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the log epoch
			cur := subEnd(t, c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
				Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}}))
			c.ack(cur)
			e.until("the first ack", func(s *session) bool { return !s.suppressed && s.ackCursor == cur })
			if polled {
				e.until("parked after the ack", parked)
			}
			for k := range 3 {
				seq := e.pushAs("b", "cb", "b"+string(rune('1'+k)), "t1", "p1")
				m := c.next()
				if m.op != ws.OpBinary || len(m.data) == 0 || m.data[0] != wire.ChannelTagDelta {
					t.Fatalf("got op %v %q, want a delta", m.op, m.data)
				}
				if seqs := deltaSeqs(t, m.data); len(seqs) != 1 || seqs[0] != seq {
					t.Fatalf("delta of %v, want %d", seqs, seq)
				}
				c.ack(seq)
				e.until("the ack of the delta", func(s *session) bool { return s.ackCursor == seq && !s.suppressed })
				if polled {
					e.until("parked again", parked)
				}
			}
			if st := e.hub.Stats(); st.Deltas != 3 {
				t.Fatalf("stats %+v: want 3 deltas", st)
			}
			closeAndWaitGone(t, e, c)
		})
	}
}

// TestParkedSocketClosedByServer: a server-side close of a parked socket
// (the hub's Close) writes the close frame and ends the session, though
// no reader goroutine was running.
func TestParkedSocketClosedByServer(t *testing.T) {
	e := newRaceEnv(t, nil)
	c := e.attach()
	if m := c.next(); !isHello(m) {
		t.Fatalf("first message %q, want hello", m.data)
	}
	if e.hub.poll != nil {
		e.until("parked", func(s *session) bool {
			s.conn.mu.Lock()
			defer s.conn.mu.Unlock()
			return s.conn.parked
		})
	}
	done := make(chan struct{})
	go func() { e.hub.Close(); close(done) }()
	for {
		m := c.next()
		if m.op == ws.OpClose {
			break
		}
	}
	_ = c.nc.Close() // the peer's side of the closing handshake
	select {
	case <-done:
	case <-time.After(raceWait):
		t.Fatal("Close did not return")
	}
	deadline := time.Now().Add(raceWait)
	for e.hub.Stats().Sessions != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session outlived the hub's close")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func isHello(m raceMsg) bool {
	ev, err := wire.ParseServerEvent(m.data)
	return err == nil && m.op == ws.OpText && ev.EventName() == "hello"
}

// clientFrames returns client (masked) frames, concatenated.
func clientFrames(t testing.TB, frames ...ws.Frame) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, f := range frames {
		if err := ws.WriteFrame(&b, ws.MaskFrame(f)); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func ackFrame(cursor int64) ws.Frame {
	return ws.NewTextFrame(wire.Ack{Cursor: cursor}.AppendJSON(nil))
}

// TestMaskedAck: the poller's ack reader takes exactly one complete,
// masked, unfragmented ack frame, and leaves everything else (to the
// reader goroutine) untouched.
func TestMaskedAck(t *testing.T) {
	two := clientFrames(t, ackFrame(41), ackFrame(42))
	cursor, size, ok := maskedAck(two)
	if !ok || cursor != 41 || size != len(two)/2 {
		t.Fatalf("two acks: %d %d %v, want 41 %d true", cursor, size, ok, len(two)/2)
	}
	if cursor, size, ok := maskedAck(two[size:]); !ok || cursor != 42 || size != len(two)/2 {
		t.Fatalf("second ack: %d %d %v", cursor, size, ok)
	}
	other := clientFrames(t, ws.NewTextFrame([]byte(`{"cursor":7,"type":"ack"}`)))
	if cursor, _, ok := maskedAck(other); !ok || cursor != 7 {
		t.Fatalf("cursor-first ack: %d %v", cursor, ok)
	}
	unmasked := func() []byte {
		var b bytes.Buffer
		_ = ws.WriteFrame(&b, ackFrame(3))
		return b.Bytes()
	}()
	fragment := ackFrame(3)
	fragment.Header.Fin = false
	long := ws.NewTextFrame([]byte(`{"type":"ack","cursor":1}` + strings.Repeat(" ", 120)))
	for name, b := range map[string][]byte{
		"unmasked":       unmasked,
		"fragment":       clientFrames(t, fragment),
		"cut":            clientFrames(t, ackFrame(3))[:len(clientFrames(t, ackFrame(3)))-1],
		"header only":    clientFrames(t, ackFrame(3))[:2],
		"binary":         clientFrames(t, ws.NewBinaryFrame(wire.Ack{Cursor: 3}.AppendJSON(nil))),
		"ping":           clientFrames(t, ws.NewPingFrame([]byte("x"))),
		"close":          clientFrames(t, ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))),
		"presence":       clientFrames(t, ws.NewTextFrame([]byte(`{"type":"presence","action":"leave","scopeKey":"k"}`))),
		"extended":       clientFrames(t, long),
		"ack with space": clientFrames(t, ws.NewTextFrame([]byte(`{"type":"ack", "cursor":3}`))),
		"empty":          nil,
	} {
		if cursor, size, ok := maskedAck(b); ok {
			t.Errorf("%s: took an ack (%d, %d bytes)", name, cursor, size)
		}
	}
}

// TestParkedSocketAcksWithoutReader: acks to a parked socket are read by
// the poller itself (no reader goroutine starts), whether one per write,
// several in one segment, or one cut across two writes; other frames
// after acks reach a reader goroutine with the bytes the poller already
// read, in order (a ping after two acks is answered, the acks recorded).
func TestParkedSocketAcksWithoutReader(t *testing.T) {
	e := newRaceEnv(t, nil)
	if e.hub.poll == nil {
		t.Skip("no poller on this system")
	}
	c := e.attach()
	if m := c.next(); !isHello(m) {
		t.Fatalf("first message %q, want hello", m.data)
	}
	e.until("parked", parked)
	readers := e.hub.polledReaders.Load()
	writeRaw := func(b []byte) {
		t.Helper()
		if _, err := c.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for k := int64(1); k <= 5; k++ {
		writeRaw(clientFrames(t, ackFrame(k))) // one segment, as browsers write it
		e.until("the ack", func(s *session) bool { return s.ackCursor == k && parked(s) })
	}
	writeRaw(clientFrames(t, ackFrame(6), ackFrame(7), ackFrame(8)))
	e.until("three acks in one write", func(s *session) bool { return s.ackCursor == 8 && parked(s) })
	// Cut after its header, as a client writing header and payload apart
	// sends it, and within the header.
	for k, at := range []int{6, 1} {
		cut := clientFrames(t, ackFrame(int64(10+k)))
		writeRaw(cut[:at])
		e.until("the start of an ack kept", func(s *session) bool {
			s.conn.mu.Lock()
			defer s.conn.mu.Unlock()
			return s.conn.parked && len(s.conn.partial) == at
		})
		writeRaw(cut[at:])
		e.until("a cut ack", func(s *session) bool { return s.ackCursor == int64(10+k) && parked(s) })
	}
	if n := e.hub.polledReaders.Load() - readers; n != 0 {
		t.Fatalf("%d reader goroutines for acks, want 0", n)
	}
	writeRaw(clientFrames(t, ackFrame(20), ackFrame(21), ws.NewPingFrame([]byte("p1")), ackFrame(22)))
	if m := c.next(); m.op != ws.OpPong || string(m.data) != "p1" {
		t.Fatalf("got op %v %q, want the pong", m.op, m.data)
	}
	e.until("acks around a ping", func(s *session) bool { return s.ackCursor == 22 && parked(s) })
	if n := e.hub.polledReaders.Load() - readers; n != 1 {
		t.Fatalf("%d reader goroutines for the ping, want 1", n)
	}
	closeAndWaitGone(t, e, c)
}

// TestReleaseAfterChurn: a burst of connects and disconnects at least
// ReleaseAfterChurn long is followed, once quiet, by one memory release;
// a smaller one by none, and a negative threshold turns it off.
func TestReleaseAfterChurn(t *testing.T) {
	for _, tc := range []struct {
		threshold, sockets int
		want               int64
	}{{threshold: 6, sockets: 3, want: 1}, {threshold: 100, sockets: 3, want: 0}, {threshold: -1, sockets: 3, want: 0}} {
		e := newRaceEnv(t, func(c *Config) { c.ReleaseAfterChurn = tc.threshold })
		for range tc.sockets {
			c := e.attach()
			if m := c.next(); !isHello(m) {
				t.Fatalf("first message %q, want hello", m.data)
			}
			closeAndWaitGone(t, e, c)
		}
		time.Sleep(3 * churnQuiet)
		if got := e.hub.Stats().MemoryReleases; got != tc.want {
			t.Errorf("threshold %d, %d sockets: %d releases, want %d", tc.threshold, tc.sockets, got, tc.want)
		}
	}
}

// TestReleaseAfterChurnWithinSpacing: a second burst that ends before the
// releaser's spacing since the first release has passed is released once
// it has (before, it was dropped: a reconnect storm's clients leaving a
// few seconds after their reconnects left the storm's garbage resident
// until the runtime's own collection two minutes later).
func TestReleaseAfterChurnWithinSpacing(t *testing.T) {
	const spacing = 2 * time.Second
	e := newRaceEnv(t, func(c *Config) { c.ReleaseAfterChurn, c.Releaser = 3, memfree.New(spacing, nil) })
	burst := func() {
		for range 3 {
			c := e.attach()
			if m := c.next(); !isHello(m) {
				t.Fatalf("first message %q, want hello", m.data)
			}
			closeAndWaitGone(t, e, c)
		}
	}
	releases := func(want int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for e.hub.Stats().MemoryReleases != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d releases after %v, want %d", e.hub.Stats().MemoryReleases, within, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	burst()
	releases(1, 5*churnQuiet)
	first := time.Now()
	burst()
	releases(2, spacing+5*churnQuiet)
	if since := time.Since(first); since < spacing-churnQuiet {
		t.Errorf("the second release came %v after the first was seen, before the spacing (%v)", since, spacing)
	}
}

// TestParkedSocketStalledFrame: the start of a frame kept by the poller
// and never finished ends the connection by the stall timeout (checked
// at the heartbeat), as a reader goroutine would have.
func TestParkedSocketStalledFrame(t *testing.T) {
	e := newRaceEnv(t, func(c *Config) {
		c.StallTimeout, c.Heartbeat = 100*time.Millisecond, 50*time.Millisecond
	})
	if e.hub.poll == nil {
		t.Skip("no poller on this system")
	}
	c := e.attach()
	if m := c.next(); !isHello(m) {
		t.Fatalf("first message %q, want hello", m.data)
	}
	e.until("parked", func(s *session) bool {
		s.conn.mu.Lock()
		defer s.conn.mu.Unlock()
		return s.conn.parked
	})
	if _, err := c.nc.Write(clientFrames(t, ackFrame(1))[:3]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(raceWait)
	for e.hub.Stats().Sessions != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a stalled frame kept the connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkAckRead: taking one client ack off bytes already received, by
// the poller (maskedAck, this branch) and by a reader goroutine's path
// (readMessage through a bufio reader with the stall deadlines, as every
// ack was read before). Neither counts the system calls or the goroutine
// start around them.
func BenchmarkAckRead(b *testing.B) {
	frame := clientFrames(b, ackFrame(123456))
	b.Run("poller", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := maskedAck(frame); !ok {
				b.Fatal("not an ack")
			}
		}
	})
	b.Run("reader", func(b *testing.B) {
		sv, cl := net.Pipe()
		defer sv.Close()
		defer cl.Close()
		c := newConn(sv, 8, 1<<20, time.Second, nil)
		src := &prefixed{nc: sv}
		r := bufio.NewReaderSize(src, readBufferSize)
		for b.Loop() {
			src.b = frame
			m, err := c.readMessage(r, 1<<20, time.Second, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := wire.ParseAckFast(m.payload); !ok {
				b.Fatal("not an ack")
			}
		}
	})
}

// parked reports whether the session's socket is parked with the poller
// (no reader goroutine).
func parked(s *session) bool {
	s.conn.mu.Lock()
	defer s.conn.mu.Unlock()
	return s.conn.parked
}

// closeAndWaitGone closes the client's socket and waits until the hub has
// no session left.
func closeAndWaitGone(t *testing.T, e *raceEnv, c *raceClient) {
	t.Helper()
	_ = c.nc.Close()
	deadline := time.Now().Add(raceWait)
	for e.hub.Stats().Sessions != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session outlived its closed socket")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
