package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// vsocket is a virtual realtime client: a replica subscribed to the run's
// scope, registered by a pull, and its realtime connection. It applies
// and acks deltas, and on hello.requiresSync or a wake-up runs a pull
// round (over HTTP) and acks the new floor (§8.2, §8.4).
type vsocket struct {
	r  *runner
	i  int
	c  *sspclient.Client
	rt *sspclient.Realtime
	// done is closed when the connection's read loop ends.
	done chan struct{}
	// onDelta observes each applied delta: its nextCursor, when the tool
	// read it, and when the kernel received it (zero when not recorded).
	onDelta func(s *vsocket, cursor int64, at, rx time.Time)
	// rx records the kernel's receive times of the realtime connection.
	rx *rxClock

	// polled: the connection is read by a sockPoller (see consume), not
	// by readLoop; the fields below are its reader's state, used on the
	// poller's goroutine only.
	polled  bool
	pending []byte    // the start of a frame cut by the end of a read
	fragOp  ws.OpCode // the opcode of a fragmented message being assembled
	fragZ   bool      // and whether it is compressed
	// deflate: the connection negotiated permessage-deflate (RSV1 marks
	// a compressed message).
	deflate bool
	frag    []byte
	// messages counts the messages the poller's reader assembled.
	messages int
	// endWhy says why the poller ended the connection (the run reports
	// the sockets that ended before it did).
	endWhy  string
	endOnce sync.Once
	// recovering: a recovery pull runs; recAgain: another was asked for.
	recMu                sync.Mutex
	recovering, recAgain bool
}

// socketCounters count realtime events across all sockets.
type socketCounters struct {
	deltas, wakes, recoveries, requiresSync atomic.Int64
	// inflated counts the compressed messages the epoll readers
	// inflated (-ws-deflate; sspclient's readers do not count theirs).
	inflated atomic.Int64
}

// newSocket creates virtual client i and registers its subscription
// with a pull.
func (r *runner) newSocket(ctx context.Context, i int) (*vsocket, error) {
	rx := &rxClock{}
	c, err := r.client(i, sspclient.Options{RealtimeNetDial: rx.dial, RealtimeDeflate: r.cfg.WSDeflate})
	if err != nil {
		return nil, err
	}
	if err := r.subscribe(c, r.cfg.Scope); err != nil {
		return nil, err
	}
	if _, err := c.SyncUntilQuiet(ctx, 20); err != nil {
		return nil, fmt.Errorf("client %d registration: %w", i, err)
	}
	return &vsocket{r: r, i: i, c: c, rx: rx}, nil
}

// openSockets creates, registers and connects n sockets, 64 at a time.
func (r *runner) openSockets(ctx context.Context, n int, onDelta func(s *vsocket, cursor int64, at, rx time.Time)) ([]*vsocket, error) {
	socks := make([]*vsocket, n)
	var opened atomic.Int64
	r.status(func(time.Duration) string {
		return fmt.Sprintf("connect %s/%s sockets", groupThousands(opened.Load()), groupThousands(int64(n)))
	})
	defer r.stopStatus()
	err := parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		s, err := r.newSocket(ctx, i)
		if err != nil {
			return err
		}
		s.onDelta = onDelta
		if err := s.connect(ctx); err != nil {
			return err
		}
		socks[i] = s
		opened.Add(1)
		return nil
	})
	if err != nil {
		closeSockets(socks)
	}
	return socks, err
}

// connect dials the realtime channel, recovers when hello requires a
// sync, and starts the read loop.
func (s *vsocket) connect(ctx context.Context) error {
	rt, err := s.c.DialRealtime(ctx, s.r.cfg.authHeader(s.i))
	if err != nil {
		return fmt.Errorf("client %d: %w", s.i, err)
	}
	if s.r.cfg.WSDeflate && !rt.Deflate {
		_ = rt.Drop()
		return fmt.Errorf("client %d: the server declined permessage-deflate", s.i)
	}
	s.rt, s.done, s.deflate = rt, make(chan struct{}), rt.Deflate
	if rt.Hello.RequiresSync {
		s.r.sockets.requiresSync.Add(1)
		if err := s.recover(ctx); err != nil {
			_ = rt.Drop()
			close(s.done)
			return fmt.Errorf("client %d recovery: %w", s.i, err)
		}
	}
	if p := s.r.pollerFor(s.i); p != nil && p.add(s) {
		return nil
	}
	go s.readLoop(rt, s.done)
	return nil
}

// recover runs the recovery pull and acks the new floor.
func (s *vsocket) recover(ctx context.Context) error {
	s.r.sockets.recoveries.Add(1)
	if _, err := s.c.SyncUntilQuiet(ctx, 100); err != nil {
		return s.r.fail(err)
	}
	if floor, ok := s.c.AckFloor(); ok {
		return s.rt.Ack(floor)
	}
	return nil
}

func (s *vsocket) readLoop(rt *sspclient.Realtime, done chan struct{}) {
	defer close(done)
	ctx := context.Background()
	for {
		m, err := rt.Next()
		if err != nil {
			s.endWhy = "read: " + err.Error()
			return
		}
		switch {
		case m.Delta != nil:
			at := time.Now()
			rx, _ := s.rx.last()
			cursor, err := s.c.ApplyDelta(m.Delta)
			if err != nil {
				if !errors.Is(err, sspclient.ErrDeltaDropped) {
					s.r.fail(err)
				}
				_ = s.recover(ctx)
				continue
			}
			s.r.sockets.deltas.Add(1)
			if cursor >= 0 {
				if err := rt.Ack(cursor); err != nil {
					return
				}
				if s.onDelta != nil {
					s.onDelta(s, cursor, at, rx)
				}
			}
		case m.Event != nil:
			if w, ok := m.Event.(wire.Wake); ok {
				s.r.sockets.wakes.Add(1)
				if s.cursor() < w.Cursor {
					_ = s.recover(ctx)
				}
			}
		}
	}
}

// cursor is the subscription's cursor.
func (s *vsocket) cursor() int64 {
	st, _ := s.c.Subscription("bench-" + s.r.gen.table.Name())
	return st.Cursor
}

// drop closes the connection without a close frame and waits for the
// read loop.
func (s *vsocket) drop() {
	if s.polled {
		s.endPolled()
		return
	}
	if s.rt != nil {
		_ = s.rt.Drop()
		<-s.done
	}
}

func closeSockets(socks []*vsocket) {
	var wg sync.WaitGroup
	for _, s := range socks {
		if s == nil || s.rt == nil {
			continue
		}
		if s.polled {
			_ = s.rt.Close()
			s.endPolled()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.rt.Close()
			<-s.done
		}()
	}
	wg.Wait()
}
