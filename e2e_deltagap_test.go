package syncgo_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
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

// TestE2EDeltaAfterLostPull: the server records a pull's cursors when it
// serves the pull, so a pull whose response was lost leaves the client
// record ahead of the client. A socket opened then says the client is
// in sync (hello's cursor is the latest) and the server sends the next
// commit as a delta, which is not contiguous with what the client holds:
// the client refuses it (sspclient.ErrCatchingUp) until it has pulled to
// the latest cursor at connect, and then holds both commits. (The fault
// suite lost rows this way: a delta applied over the gap advanced the
// subscription's cursor past a commit the client never received.)
func TestE2EDeltaAfterLostPull(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		lt := &losingTransport{base: http.DefaultTransport}
		reader := e.client("reader", sspclient.Options{HTTPClient: &http.Client{Transport: lt}})
		writer := e.client("writer", sspclient.Options{})
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

		rt, err := reader.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if rt.Hello.RequiresSync || rt.Hello.Cursor != head || rt.Hello.LatestCursor != head {
			t.Fatalf("hello %+v: want the client record at the head %d (the lost pull's cursor), no sync required", rt.Hello, head)
		}
		floor, ok := reader.AckFloor()
		if !ok || floor >= head {
			t.Fatalf("reader's floor %d (%v), want below the head %d", floor, ok, head)
		}
		if err := rt.Ack(floor); err != nil {
			t.Fatal(err)
		}

		mustUpsert(t, writer, taskRow("b", "p1", "second"))
		syncQuiet(t, writer)
		delta := nextDelta(t, rt)
		if _, err := reader.ApplyDelta(delta); !errors.Is(err, sspclient.ErrCatchingUp) {
			t.Fatalf("a delta past the gap: err %v, want ErrCatchingUp", err)
		}
		if _, ok := reader.Row("tasks", "b"); ok {
			t.Fatal("the refused delta's row was applied")
		}
		syncQuiet(t, reader)
		for _, id := range []string{"a", "b"} {
			if _, ok := reader.Row("tasks", id); !ok {
				t.Fatalf("row %s missing after the pull", id)
			}
		}
		// Caught up: the next delta applies.
		mustUpsert(t, writer, taskRow("c", "p1", "third"))
		syncQuiet(t, writer)
		if floor, ok := reader.AckFloor(); ok {
			_ = rt.Ack(floor)
		}
		cursor, err := reader.ApplyDelta(nextDelta(t, rt))
		if err != nil || cursor != e.partitionState().MaxCommitSeq {
			t.Fatalf("the delta after the pull: cursor %d, err %v; want %d", cursor, err, e.partitionState().MaxCommitSeq)
		}
		if _, ok := reader.Row("tasks", "c"); !ok {
			t.Fatal("row c missing after its delta")
		}
	})
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
