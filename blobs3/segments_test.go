package blobs3

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// Segments over an in-process index passes the segment-store contract.
func TestSegmentsContract(t *testing.T) {
	storetest.RunSegmentStore(t, func(tb testing.TB) (store.SegmentStore, func(testing.TB) store.SegmentStore) {
		return &Segments{Index: engine.NewMemorySegments(64 << 20), Objects: mustOpen(tb, testS3(tb))}, nil
	})
}

// A published segment's bytes are an object the presigned URL serves
// without credentials; a sweep that drops the segment from the index
// deletes the object once it is older than the grace, not before.
func TestSegmentsObjectAndSweep(t *testing.T) {
	ctx := context.Background()
	obj := mustOpen(t, testS3(t))
	s := &Segments{Index: engine.NewMemorySegments(64 << 20), Objects: obj}
	data, id := blob(70_000)
	now := time.Now().UnixMilli()
	if err := s.PublishSegment(ctx, id, data, store.SegmentPublication{Partition: "p", Table: "t", CreatedAtMs: now, ExpiresAtMs: now + 1000}); err != nil {
		t.Fatal(err)
	}
	get := func() (int, []byte) {
		u, err := s.PresignSegmentGet(ctx, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return getURL(t, u)
	}
	if st, b := get(); st != 200 || !bytes.Equal(b, data) {
		t.Fatalf("presigned GET: %d, %d bytes", st, len(b))
	}
	if _, err := s.SweepSegments(ctx, now+2000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Segment(ctx, id); err != store.ErrNotFound {
		t.Fatalf("index still holds the swept segment: %v", err)
	}
	if st, _ := get(); st != 200 {
		t.Fatalf("an object younger than the grace was deleted: %d", st)
	}
	if _, err := s.SweepSegments(ctx, now+2000+(segGrace+time.Minute).Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(); st != 404 {
		t.Fatalf("the object of a swept segment survived the grace: %d", st)
	}
}
