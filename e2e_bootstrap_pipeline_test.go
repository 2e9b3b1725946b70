package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// failingSegments fails the first PublishSegment call of one chosen page
// (the page after row failAfter), after a delay (the write is in flight while
// the server builds the next pages), and records the ids the underlying
// store accepted.
type failingSegments struct {
	store.SegmentStore
	failAfter string
	failed    atomic.Bool // the one failure happened
	calls     atomic.Int64
	mu        sync.Mutex
	stored    map[string]bool
}

func (f *failingSegments) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	if f.calls.Add(1); pub.RowCursor != nil && *pub.RowCursor == f.failAfter && f.failed.CompareAndSwap(false, true) {
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

// pagedPull writes n rows t00, t01, ... of project p1 and returns a
// bootstrap pull of them for clientID in pages of 5 rows, by reference
// only.
func pagedPull(t *testing.T, e *e2eEnv, n int, clientID string) []byte {
	t.Helper()
	w := e.client("writer", sspclient.Options{})
	for i := range n {
		mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
	}
	syncQuiet(t, w)
	epoch := e.partitionState().LogEpoch
	return encodeRequest(t, &wire.Request{Version: 3,
		Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		Pull:   &wire.PullHeader{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 5, MaxSnapshotPages: 10},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
}

// A page's SEGMENT_REF goes out only after its segment store write
// landed, and after the pages' before it: a write overlaps the next
// pages' builds, but when it fails (or the process dies before it lands)
// no descriptor names a segment the store does not hold, none of a later
// page goes out, the pull fails, and the client's retry bootstraps the
// exact rows.
func TestE2ESegmentRefAfterStoreWrite(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var segs *failingSegments
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
			segs = &failingSegments{SegmentStore: c.Store.(store.SegmentStorer).SegmentStore(), failAfter: "t04", stored: map[string]bool{}}
			c.Segments = segs
		})
		pull := pagedPull(t, e, 12, "pipe-device")
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
			t.Fatalf("pull with the second page's segment write failing: HTTP %d, %d refs, SUB_END %v, failed %v; want a failed pull with at most the first page's ref",
				r.status, refs, ended, failed)
		}
		if n := segs.calls.Load(); n < 2 {
			t.Fatalf("%d segment writes; the second page's was to fail", n)
		}
		c := e.client("alice", sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 5})
		mustSubscribe(t, c, "s", "p1")
		syncQuiet(t, c)
		sameRows(t, "retried bootstrap", clientRows(t, c, "tasks"), e.serverRows("tasks"))
	})
}

// gatedSegments holds the PublishSegment call of one page (the page after
// row holdAfter) until release is closed, or for a minute.
type gatedSegments struct {
	store.SegmentStore
	holdAfter string
	release   chan struct{}
	released  atomic.Bool // the held write went on because release closed
}

func (g *gatedSegments) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	if pub.RowCursor != nil && *pub.RowCursor == g.holdAfter {
		select {
		case <-g.release:
			g.released.Store(true)
		case <-time.After(time.Minute):
		}
	}
	return g.SegmentStore.PublishSegment(ctx, id, b, pub)
}

// A bootstrap's SEGMENT_REFs are sent as their segments land, not held
// to the end of the response: a client reading the response as it comes
// has the first page's descriptor while a later page's segment write is
// still held (released only by the client seeing that descriptor), in
// the identity coding and through the compressor alike, and the response
// then ends whole, every descriptor naming a stored segment.
func TestE2ESegmentRefStreamed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, enc := range []string{"identity", "zstd"} {
			t.Run(enc, func(t *testing.T) {
				var segs *gatedSegments
				e := newE2EEnv(t, d, func(c *syncgo.Config) {
					c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
					segs = &gatedSegments{SegmentStore: c.Store.(store.SegmentStorer).SegmentStore(), holdAfter: "t09",
						release: make(chan struct{})}
					c.Segments = segs
				})
				pull := pagedPull(t, e, 15, "stream-device")
				req, err := http.NewRequest(http.MethodPost, e.url+"/sync", body(pull))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", sspclient.ContentType)
				req.Header.Set("Authorization", "Bearer alice")
				req.Header.Set("Accept-Encoding", enc)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != strings.TrimPrefix(enc, "identity") {
					t.Fatalf("HTTP %d, Content-Encoding %q; want 200 in %s", resp.StatusCode, resp.Header.Get("Content-Encoding"), enc)
				}
				var src io.Reader = resp.Body
				if enc == "zstd" {
					zr, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
					if err != nil {
						t.Fatal(err)
					}
					defer zr.Close()
					src = zr
				}
				dec := wire.NewDecoder(src, wire.DecoderOptions{Kind: wire.KindResponse})
				if _, _, err := dec.Header(); err != nil {
					t.Fatal(err)
				}
				refs, ended := 0, false
				for {
					f, err := dec.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("after %d refs: %v", refs, err)
					}
					switch f := f.(type) {
					case *wire.SegmentRef:
						if _, err := segs.SegmentStore.Segment(context.Background(), f.SegmentID); err != nil {
							t.Fatalf("SEGMENT_REF %d: the segment store has no %s: %v", refs+1, f.SegmentID, err)
						}
						if refs++; refs == 1 {
							close(segs.release)
						}
					case *wire.SubEnd:
						ended = true
					case *wire.ErrorFrame:
						t.Fatalf("ERROR frame %s: %s", f.Code, f.Message)
					}
				}
				if refs != 3 || !ended || !segs.released.Load() {
					t.Fatalf("%d refs, SUB_END %v, the third page's write released by the first ref %v; want 3, true, true",
						refs, ended, segs.released.Load())
				}
			})
		}
	})
}
