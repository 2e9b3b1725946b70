package syncgo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// losingTransport delivers requests and, while lose is set, reads the
// response and loses it: the server served the round, the client never
// saw it.
type losingTransport struct {
	base http.RoundTripper
	lose atomic.Bool
}

var errResponseLost = errors.New("response lost")

func (lt *losingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := lt.base.RoundTrip(r)
	if err != nil || !lt.lose.Load() {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, errResponseLost
}

// newLosingPair starts a server and two clients: a reader whose
// responses the returned transport loses while told to, and a writer.
func newLosingPair(t *testing.T, d e2eDriver) (*e2eEnv, *losingTransport, *sspclient.Client, *sspclient.Client) {
	t.Helper()
	e := newE2EEnv(t, d)
	lt := &losingTransport{base: http.DefaultTransport}
	reader := e.client("reader", sspclient.Options{HTTPClient: &http.Client{Transport: lt}})
	return e, lt, reader, e.client("writer", sspclient.Options{})
}

// TestE2EDeltaAfterLostPull: a pull whose response is lost leaves the
// client where it was. Had the server recorded the cursor that response
// answered, a socket opened then would be told the client was in sync,
// and the next commit would reach it as a delta past what it holds,
// applied over the gap: the commits in between lost for good (the fault
// suite lost rows this way). The server records the cursors the request
// sent instead: hello says the client must pull, the next commit is a
// wake-up, and deltas resume once the client's ack covers the log.
func TestE2EDeltaAfterLostPull(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, lt, reader, writer := newLosingPair(t, d)
		mustSubscribe(t, reader, "s", "p1")
		mustSubscribe(t, writer, "s", "p1")
		syncQuiet(t, reader)
		syncQuiet(t, writer)

		mustUpsert(t, writer, taskRow("a", "p1", "first"))
		syncQuiet(t, writer)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		lt.lose.Store(true)
		if _, err := reader.Round(ctx); !errors.Is(err, errResponseLost) {
			t.Fatalf("lost round: %v", err)
		}
		lt.lose.Store(false)
		head := e.partitionState().MaxCommitSeq
		floor, ok := reader.AckFloor()
		if !ok || floor >= head {
			t.Fatalf("reader's floor %d (%v), want below the head %d", floor, ok, head)
		}

		rt, err := reader.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if !rt.Hello.RequiresSync || rt.Hello.Cursor != floor || rt.Hello.LatestCursor != head {
			t.Fatalf("hello %+v: want the cursor the client holds (%d), the head %d, and a sync required", rt.Hello, floor, head)
		}
		if err := rt.Ack(floor); err != nil {
			t.Fatal(err)
		}

		mustUpsert(t, writer, taskRow("b", "p1", "second"))
		syncQuiet(t, writer)
		if m := nextMessage(t, rt); m.Delta != nil {
			t.Fatal("a delta reached a client behind the log; want a wake-up")
		} else if w, ok := m.Event.(wire.Wake); !ok || w.Reason != wire.WakeCatchupRequired {
			t.Fatalf("after a commit: %+v, want a catchup-required wake-up", m.Event)
		}
		syncQuiet(t, reader)
		for _, id := range []string{"a", "b"} {
			if _, ok := reader.Row("tasks", id); !ok {
				t.Fatalf("row %s missing after the pull", id)
			}
		}
		// Caught up and acked: deltas resume. The ack travels on the
		// socket and the next commit over HTTP: a commit that the server
		// notifies before it has read the ack is still a wake-up, and the
		// client pulls and acks again.
		for attempt := 0; ; attempt++ {
			if floor, ok := reader.AckFloor(); ok {
				_ = rt.Ack(floor)
			}
			id := fmt.Sprintf("c%d", attempt)
			mustUpsert(t, writer, taskRow(id, "p1", "after"))
			syncQuiet(t, writer)
			m := nextMessage(t, rt)
			if m.Delta == nil {
				if attempt == 4 {
					t.Fatal("5 commits after the client caught up and acked were wake-ups; want a delta")
				}
				syncQuiet(t, reader)
				continue
			}
			cursor, err := reader.ApplyDelta(m.Delta)
			if err != nil || cursor != e.partitionState().MaxCommitSeq {
				t.Fatalf("the delta after the pull: cursor %d, err %v; want %d", cursor, err, e.partitionState().MaxCommitSeq)
			}
			if _, ok := reader.Row("tasks", id); !ok {
				t.Fatalf("row %s missing after its delta", id)
			}
			break
		}
	})
}

// nextMessage reads the socket's next delta or wake-up (heartbeats and
// presence skipped).
func nextMessage(t *testing.T, rt *sspclient.Realtime) sspclient.RealtimeMessage {
	t.Helper()
	for {
		m, err := rt.Next()
		if err != nil {
			t.Fatalf("waiting for a message: %v", err)
		}
		if _, ok := m.Event.(wire.Wake); ok || m.Delta != nil {
			return m
		}
	}
}

// TestE2EClientRecordKeepsAck: an ack after a delta (§8.2) covers the
// subscriptions the delta did not touch, whose cursors the client still
// sends lower in its next round. That round keeps the acked cursor in
// the client record (the subscription list is the same), so the record
// is not moved back, and a socket opened after it is not sent to pull;
// a lost response of that round changes nothing.
func TestE2EClientRecordKeepsAck(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, lt, reader, writer := newLosingPair(t, d)
		mustSubscribe(t, reader, "s1", "p1")
		mustSubscribe(t, reader, "s2", "p2")
		mustUpsert(t, writer, taskRow("x", "p2", "before"))
		syncQuiet(t, writer)
		syncQuiet(t, reader)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		record := func() int64 { return recordCursor(ctx, t, e, reader) }
		rt := dialInSync(ctx, t, reader)
		head := commitAndAck(t, e, writer, reader, rt, taskRow("a", "p1", "delta"))
		eventually(t, "the ack persisted", func() bool { return record() == head })
		if s, _ := reader.Subscription("s2"); s.Cursor >= head {
			t.Fatalf("s2's cursor %d; want below the acked %d (the delta did not touch it)", s.Cursor, head)
		}
		_ = rt.Close()

		lt.lose.Store(true)
		if _, err := reader.Round(ctx); !errors.Is(err, errResponseLost) {
			t.Fatalf("lost round: %v", err)
		}
		lt.lose.Store(false)
		if got := record(); got != head {
			t.Fatalf("after a round sending s2's lower cursor: record %d; want the acked %d", got, head)
		}
		rt, err := reader.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if rt.Hello.RequiresSync || rt.Hello.Cursor != head {
			t.Fatalf("hello %+v: want the acked cursor %d and no sync required", rt.Hello, head)
		}
	})
}

// recordCursor is the cursor of a client's stored record.
func recordCursor(ctx context.Context, t *testing.T, e *e2eEnv, c *sspclient.Client) int64 {
	t.Helper()
	rec, err := e.store.Client(ctx, e2ePartition, c.ClientID())
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	return rec.Cursor
}

// dialInSync opens a client's socket after a quiet sync: hello must not
// ask for a pull.
func dialInSync(ctx context.Context, t *testing.T, c *sspclient.Client) *sspclient.Realtime {
	t.Helper()
	rt, err := c.DialRealtime(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Hello.RequiresSync {
		t.Fatalf("hello %+v after a quiet sync: want no sync required", rt.Hello)
	}
	return rt
}

// commitAndAck commits rows through the writer, applies the reader's
// delta of them (which must reach the head) and acks it: the head.
func commitAndAck(t *testing.T, e *e2eEnv, writer, reader *sspclient.Client, rt *sspclient.Realtime, rows ...map[string]any) int64 {
	t.Helper()
	for _, row := range rows {
		mustUpsert(t, writer, row)
	}
	syncQuiet(t, writer)
	head := e.partitionState().MaxCommitSeq
	cursor, err := reader.ApplyDelta(nextDelta(t, rt))
	if err != nil || cursor != head {
		t.Fatalf("delta: cursor %d, err %v; want %d", cursor, err, head)
	}
	if err := rt.Ack(cursor); err != nil {
		t.Fatal(err)
	}
	return head
}

// nextDelta reads the socket until a delta arrives.
func nextDelta(t *testing.T, rt *sspclient.Realtime) []byte {
	t.Helper()
	for {
		m, err := rt.Next()
		if err != nil {
			t.Fatalf("waiting for a delta: %v", err)
		}
		if m.Delta != nil {
			return m.Delta
		}
	}
}

// TestE2EAckAfterSubscriptionOverHTTP: a subscription added by a pull
// over HTTP while the client's socket stays connected is registered on
// the socket only at its next connect (§8.1), so the socket's deltas do
// not carry its commits, and an ack of them does not cover it. The ack is
// not persisted while the record stores a list the socket did not
// register: a socket opened before the client pulls again is told to
// pull (not told it is in sync and then sent deltas past the new
// subscription's missed commits), and the pull brings them. Once the
// socket registered the list, acks are persisted again.
func TestE2EAckAfterSubscriptionOverHTTP(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		reader, writer := e.client("reader", sspclient.Options{}), e.client("writer", sspclient.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rt := ackNotOverAddedSubscription(ctx, t, e, reader, writer)
		defer rt.Close()
		if err := rt.Ack(e.partitionState().MaxCommitSeq); err != nil { // caught up (§8.2)
			t.Fatal(err)
		}

		// Registered at this connect: its acks are persisted again.
		head := commitAndAck(t, e, writer, reader, rt, taskRow("b", "p2", "delta"))
		eventually(t, "the ack persisted", func() bool { return recordCursor(ctx, t, e, reader) == head })
	})
}

// ackNotOverAddedSubscription: the reader, in sync on s1 (p1) with its
// socket open, adds s2 (p2) by a pull over HTTP (the reader's HTTP may go
// to another server than its socket); the writer commits to p2, then p1;
// the socket's delta of the p1 commit is acked, and the socket closed.
// The record must keep the cursor the pull recorded, and a new socket
// (returned, open) must be told to pull, which brings s2's commit.
func ackNotOverAddedSubscription(ctx context.Context, t *testing.T, e *e2eEnv, reader, writer *sspclient.Client) *sspclient.Realtime {
	t.Helper()
	mustSubscribe(t, reader, "s1", "p1")
	mustSubscribe(t, writer, "w", "p1", "p2")
	syncQuiet(t, reader)
	syncQuiet(t, writer)
	rt := dialInSync(ctx, t, reader)

	mustSubscribe(t, reader, "s2", "p2") // over HTTP, the socket stays
	syncQuiet(t, reader)
	added := recordCursor(ctx, t, e, reader)
	head := commitAndAck(t, e, writer, reader, rt, taskRow("missed", "p2", "only s2"), taskRow("a", "p1", "delta"))
	if _, ok := reader.Row("tasks", "missed"); ok {
		t.Fatal("the socket delivered a commit of the subscription added over HTTP")
	}
	_ = rt.Close() // persists the socket's last ack at once, or not at all
	time.Sleep(600 * time.Millisecond)
	if got := recordCursor(ctx, t, e, reader); got != added {
		t.Fatalf("record %d after an ack of a socket that did not register s2; want %d, the pull's", got, added)
	}
	rt, err := reader.DialRealtime(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rt.Hello.RequiresSync {
		_ = rt.Close()
		t.Fatalf("hello %+v: want a sync required (s2 has not had commit %d)", rt.Hello, head-1)
	}
	syncQuiet(t, reader)
	if _, ok := reader.Row("tasks", "missed"); !ok {
		_ = rt.Close()
		t.Fatal("the pull after the reconnect did not bring s2's commit")
	}
	return rt
}
