package realtime

import (
	"runtime"
	"testing"
	"time"

	"github.com/gobwas/ws"

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
			c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the log epoch
			cur := subEnd(t, c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
				Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}}))
			c.ack(cur)
			e.until("the first ack", func(s *session) bool { return !s.suppressed && s.ackCursor == cur })
			parked := func(s *session) bool {
				s.conn.mu.Lock()
				defer s.conn.mu.Unlock()
				return s.conn.parked
			}
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
			_ = c.nc.Close()
			deadline := time.Now().Add(raceWait)
			for e.hub.Stats().Sessions != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the session outlived its closed socket")
				}
				time.Sleep(2 * time.Millisecond)
			}
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
