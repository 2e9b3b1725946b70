package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// failingSegments fails one chosen PublishSegment call, after a delay
// (the write is in flight while the server builds the next page), and
// records the ids the underlying store accepted.
type failingSegments struct {
	store.SegmentStore
	failCall int64 // 1-based; 0: none
	calls    atomic.Int64
	mu       sync.Mutex
	stored   map[string]bool
}

func (f *failingSegments) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	if f.calls.Add(1) == f.failCall {
		time.Sleep(150 * time.Millisecond)
		return errors.New("segment store write failed (simulated)")
	}
	if err := f.SegmentStore.PublishSegment(ctx, id, b, pub); err != nil {
		return err
	}
	f.mu.Lock()
	f.stored[id] = true
	f.mu.Unlock()
	return nil
}

// A page's SEGMENT_REF goes out only after its segment store write
// landed: the write overlaps the next page's build, but when it fails
// (or the process dies before it lands) no descriptor names a segment
// the store does not hold, the pull fails, and the client's retry
// bootstraps the exact rows.
func TestE2ESegmentRefAfterStoreWrite(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var segs *failingSegments
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
			segs = &failingSegments{SegmentStore: c.Store.(store.SegmentStorer).SegmentStore(), failCall: 2, stored: map[string]bool{}}
			c.Segments = segs
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 12 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
		}
		syncQuiet(t, w)
		epoch := e.partitionState().LogEpoch
		pull := encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: "pipe-device", SchemaVersion: 1, LogEpoch: &epoch},
			Pull:   &wire.PullHeader{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 5, MaxSnapshotPages: 10},
			Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
				Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
		r := e.post(t, body(pull), nil)
		dec := wire.NewDecoder(bytes.NewReader(r.body), wire.DecoderOptions{Kind: wire.KindResponse})
		// The response may fail before its first chunk is released (an
		// HTTP error) or after (an ERROR frame, or a cut stream); either
		// way no descriptor may name a segment the store lacks.
		refs, ended, failed := 0, false, r.status != 200
		if _, _, err := dec.Header(); err == nil && !failed {
			for {
				f, err := dec.Next()
				if err != nil {
					failed = failed || err != io.EOF
					break
				}
				switch f := f.(type) {
				case *wire.SegmentRef:
					refs++
					segs.mu.Lock()
					held := segs.stored[f.SegmentID]
					segs.mu.Unlock()
					if !held {
						t.Fatalf("SEGMENT_REF %d names %s, which the segment store does not hold", refs, f.SegmentID)
					}
					if _, err := segs.SegmentStore.Segment(context.Background(), f.SegmentID); err != nil {
						t.Fatalf("SEGMENT_REF %d: the segment store has no %s: %v", refs, f.SegmentID, err)
					}
				case *wire.SubEnd:
					ended = true
				case *wire.ErrorFrame:
					failed = true
				}
			}
		} else {
			failed = true
		}
		if refs > 1 || ended || !failed {
			t.Fatalf("pull with the second segment write failing: HTTP %d, %d refs, SUB_END %v, failed %v; want a failed pull with at most the first page's ref",
				r.status, refs, ended, failed)
		}
		if n := segs.calls.Load(); n < 2 {
			t.Fatalf("%d segment writes; the second was to fail", n)
		}
		c := e.client("alice", sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 5})
		mustSubscribe(t, c, "s", "p1")
		syncQuiet(t, c)
		sameRows(t, "retried bootstrap", clientRows(t, c, "tasks"), e.serverRows("tasks"))
	})
}
