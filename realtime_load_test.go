package syncgo_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/realtime"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// rtSmallRcvbuf dials with a tiny receive buffer, so a client that stops
// reading backs the server up after little data.
func rtSmallRcvbuf(d ws.Dialer) ws.Dialer {
	d.NetDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nd := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			if err != nil {
				return err
			}
			return serr
		}}
		return nd.DialContext(ctx, network, addr)
	}
	return d
}

// TestRealtimeSlowConsumer: a socket that stops reading never delays
// another; past its queue bound it degrades to wakes (the drops counted by
// reason), and deltas resume once it reads and acks.
func TestRealtimeSlowConsumer(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.Realtime.QueueMessages = 4
		c.Realtime.QueueBytes = 128 << 10
	})
	b := e.peer("bob", "b1")
	b.push("c0", rtTask{id: "t0", project: "p1"})
	e.peer("alice", "slow").pull(rtSub("s", -1, "p1"))
	e.peer("alice", "fast").pull(rtSub("s", -1, "p1"))

	slow := e.dialWith(rtSmallRcvbuf(rtDialer("alice")), "slow") // not read until the end
	// but for its hello: a session that starts after the first commit
	// below is behind from the start and gets wake-ups, which never
	// fill its queue.
	slow.readFirst()
	fast := e.dial("alice", "fast")
	fast.hello()

	worst, pushed, seq := rtPushUntil(t, e, b, fast, 32<<10, 400, func(st realtime.Stats) bool {
		return st.DropsQueueFull > 0
	})
	st := e.srv.RealtimeStats()
	t.Logf("%d commits of 32 KiB; worst fast-socket delay after the push response %v; stats %+v", pushed, worst, st)
	if st.DropsQueueFull == 0 || st.Wakes == 0 {
		t.Fatalf("the slow socket never overflowed its queue: %+v", st)
	}
	if worst > time.Second {
		t.Fatalf("the fast socket waited %v for a delta", worst)
	}

	// Read now, the slow socket shows contiguous deltas, then wakes only.
	slow.startReading()
	if h := slow.hello(); h.ClientID != "slow" {
		t.Fatalf("hello %+v", h)
	}
	last := int64(1)
	for {
		m := slow.next(rtWait)
		if m.op == ws.OpBinary {
			_, next := rtDeltaRows(rtDecodeDelta(t, "slow", m))
			if next["s"] != last+1 {
				t.Fatalf("slow socket: delta at %d after %d", next["s"], last)
			}
			last = next["s"]
			continue
		}
		if ev, err := wire.ParseServerEvent(m.data); err != nil {
			t.Fatal(err)
		} else if w, ok := ev.(wire.Wake); ok && w.Reason == wire.WakeCatchupRequired {
			break
		}
	}
	t.Logf("slow socket: %d deltas, then a wake", last-1)
	// No delta follows the wake (only more wakes, up to the barrier);
	// after a catch-up ack deltas resume.
	slow.ack(seq)
	slow.publish("barrier:x", map[string]any{})
	for {
		m := slow.next(rtWait)
		if m.op == ws.OpBinary {
			t.Fatalf("a delta after the wake, before the ack: %v", m)
		}
		ev, err := wire.ParseServerEvent(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(wire.PresenceError); ok {
			break
		}
		if _, ok := ev.(wire.Wake); !ok {
			t.Fatalf("slow socket: %T %+v", ev, ev)
		}
	}
	next := b.push("c-last", rtTask{id: "last", project: "p1"})
	if rows, cur := rtDeltaRows(slow.delta()); len(rows) != 1 || cur["s"] != next {
		t.Fatalf("after the ack: %v %v", rows, cur)
	}
}

// TestRealtimeStuckConsumerClosed: a socket that takes no write for the
// write timeout is closed, and counted, while another keeps receiving.
func TestRealtimeStuckConsumerClosed(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.Realtime.QueueMessages = 1024
		c.Realtime.QueueBytes = 64 << 20
		c.Realtime.WriteTimeout = 200 * time.Millisecond
	})
	b := e.peer("bob", "b1")
	b.push("c0", rtTask{id: "t0", project: "p1"})
	e.peer("alice", "stuck").pull(rtSub("s", -1, "p1"))
	e.peer("alice", "fast").pull(rtSub("s", -1, "p1"))
	stuck := e.dialWith(rtSmallRcvbuf(rtDialer("alice")), "stuck")
	stuck.readFirst() // its hello: started before the commits (TestRealtimeSlowConsumer)
	fast := e.dial("alice", "fast")
	fast.hello()

	worst, pushed, _ := rtPushUntil(t, e, b, fast, 512<<10, 200, func(st realtime.Stats) bool {
		return st.ClosedSlow > 0
	})
	st := e.srv.RealtimeStats()
	t.Logf("%d commits of 512 KiB; worst fast-socket delay %v; stats %+v", pushed, worst, st)
	if st.ClosedSlow == 0 {
		t.Fatalf("the stuck socket was not closed: %+v", st)
	}
	if worst > 2*time.Second {
		t.Fatalf("the fast socket waited %v for a delta", worst)
	}
	eventually(t, "the stuck session detached", func() bool { return e.srv.RealtimeStats().Sessions == 1 })
	stuck.startReading()
	stuck.closed(rtWait) // what was written, then the end of the stream
}

// rtPushUntil pushes p1 commits with rows of size bytes until done holds
// (then 20 more) or limit commits, checking that fast receives each delta
// in order; it returns the worst delay from push response to delta.
func rtPushUntil(t *testing.T, e *rtEnv, b *rtPeer, fast *rtSock, size, limit int,
	done func(realtime.Stats) bool) (worst time.Duration, pushed int, seq int64) {
	t.Helper()
	notes := strings.Repeat("n", size)
	extra := -1
	for i := 1; i <= limit && extra != 0; i++ {
		id := "t" + strconv.Itoa(i)
		seq = b.push("c"+strconv.Itoa(i), rtTask{id: id, project: "p1", notes: notes})
		acked := time.Now()
		pushed++
		m := fast.next(rtWait)
		rows, next := rtDeltaRows(rtDecodeDelta(t, "fast", m))
		if len(rows) != 1 || rows[0] != id || next["s"] != seq {
			t.Fatalf("fast socket, commit %d: rows %v next %v", seq, rows, next)
		}
		worst = max(worst, m.at.Sub(acked))
		if extra < 0 && done(e.srv.RealtimeStats()) {
			extra = 20 // keep pushing: the fast socket must not notice
		} else if extra > 0 {
			extra--
		}
	}
	return worst, pushed, seq
}

// rtRaiseNoFile raises the open-file limit to at least n, or skips.
func rtRaiseNoFile(t testing.TB, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("the open-file limit is %d (hard %d); %d sockets need %d", lim.Cur, lim.Max, n/2, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot raise the open-file limit to %d: %v", n, err)
	}
}

// rtRegister writes n client records registered on p1 at the partition's
// latest cursor, exactly as a pull persists them (§8.1), and returns
// their ids.
func (e *rtEnv) rtRegister(tb testing.TB, n int, prefix string) []string {
	tb.Helper()
	ctx := context.Background()
	p, err := e.store.Partition(ctx, rtPartition)
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		ids[i] = prefix + strconv.Itoa(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.store.PutClient(ctx, rtPartition, store.ClientRecord{ClientID: ids[i], ActorID: e.actor(ids[i]),
				WireVersion: wire.Version3, Cursor: p.MaxCommitSeq, UpdatedAtMs: time.Now().UnixMilli(),
				Subscriptions: []store.SubscriptionRecord{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

// dialMany connects sockets concurrently and reads their hello.
func (e *rtEnv) dialMany(tb testing.TB, ids []string) []*rtSock {
	tb.Helper()
	socks := make([]*rtSock, len(ids))
	work := make(chan int)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s, err := rtDial(context.Background(), rtDialer(e.actor(ids[i])), e.wsURL(ids[i]), 16)
				if err != nil {
					errs <- err
					continue
				}
				s.t, s.clientID = tb, ids[i]
				s.startReading()
				socks[i] = s
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() {
		for _, s := range socks {
			_ = s.nc.Close()
		}
	})
	for _, s := range socks {
		if h := s.hello(); h.RequiresSync {
			tb.Fatalf("%s: hello %+v", s.clientID, h)
		}
	}
	return socks
}

// TestRealtimeThousandSockets: one commit reaches 1,000 sockets of one
// process.
func TestRealtimeThousandSockets(t *testing.T) {
	const n = 1000
	rtRaiseNoFile(t, 2*n+256)
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c0", rtTask{id: "t0", project: "p1"})
	socks := e.dialMany(t, e.rtRegister(t, n, "k"))
	if got := e.srv.RealtimeStats().Sessions; got != n {
		t.Fatalf("%d sessions, want %d", got, n)
	}
	start := time.Now()
	seq := b.push("c1", rtTask{id: "t1", project: "p1", title: "to all"})
	var last time.Time
	for _, s := range socks {
		m := s.next(rtWait)
		rows, next := rtDeltaRows(rtDecodeDelta(t, s.clientID, m))
		if len(rows) != 1 || rows[0] != "t1" || next["s"] != seq {
			t.Fatalf("%s: delta %v %v", s.clientID, rows, next)
		}
		if m.at.After(last) {
			last = m.at
		}
	}
	st := e.srv.RealtimeStats()
	t.Logf("1000 sockets: the last delta arrived %v after the push started; stats %+v", last.Sub(start), st)
	if st.Deltas != n || st.Wakes != 0 {
		t.Fatalf("stats %+v, want %d deltas, no wakes", st, n)
	}
}
