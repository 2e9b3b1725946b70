package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The segment store's disk use is bounded under a steady stream of new
// segments: publications expire after a TTL, a sweep deletes them, and
// (auto)vacuum makes their space reusable, so the tables stop growing once
// the stream has run for a TTL and the forget period. The test streams 60
// windows of 10 incompressible 64 KiB segments, one window per simulated
// 10 minutes with a 1 h TTL, sweeping and vacuuming after each, and
// compares the on-disk size after 60 windows with the size after 12.
func TestSegmentStorageOnDiskBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 38 MiB of segments")
	}
	s := openTest(t).(testStore)
	seg := s.SegmentStore()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const (
		stepMs = 10 * 60 * 1000
		ttlMs  = 60 * 60 * 1000
	)
	size := func() int64 {
		return queryInt(t, s.Store, `SELECT pg_total_relation_size('sync_segments') + pg_total_relation_size('sync_segment_publications')`)
	}
	var at12, peakLive int64
	for step := range 60 {
		now := int64(step) * stepMs
		for i := range 10 {
			b := make([]byte, 64<<10)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			sum := sha256.Sum256(b)
			id := "sha256:" + hex.EncodeToString(sum[:])
			pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
				MediaType: wire.MediaRows, ScopeDigest: fmt.Sprint("d", step, "-", i), AsOfCommitSeq: 1, RowCount: 1,
				CreatedAtMs: now, ExpiresAtMs: now + ttlMs}
			if err := seg.PublishSegment(ctx, id, b, pub); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := seg.SweepSegments(ctx, now-stepMs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, "VACUUM sync_segments, sync_segment_publications"); err != nil {
			t.Fatal(err)
		}
		st, err := seg.SegmentStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		peakLive = max(peakLive, st.Bytes)
		if step == 11 {
			at12 = size()
		}
	}
	end := size()
	t.Logf("segments on disk: %.1f MiB after 12 windows, %.1f MiB after 60 (%.1f MiB written; at most %.1f MiB live)",
		float64(at12)/(1<<20), float64(end)/(1<<20), 60*10*64.0/1024, float64(peakLive)/(1<<20))
	if end > at12*3/2 {
		t.Fatalf("the segment tables grew from %d to %d bytes under a steady stream; want them bounded", at12, end)
	}
}

// TestSegmentCompression: a segment's bytes are stored compressed with lz4
// where the server has it (pglz otherwise, Postgres's default) and read
// back whole.
func TestSegmentCompression(t *testing.T) {
	t.Parallel()
	s := openTest(t).(testStore)
	ctx := context.Background()
	b := []byte(strings.Repeat("a compressible segment body ", 10000))
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
		MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 1, CreatedAtMs: 1, ExpiresAtMs: 2}
	if err := s.SegmentStore().PublishSegment(ctx, id, b, pub); err != nil {
		t.Fatal(err)
	}
	var method string
	var lz4 bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_column_compression(bytes), `+"("+sqlToastLZ4+")"+` FROM sync_segments WHERE segment_id = $1`, id).Scan(&method, &lz4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	if method != want || s.segmentLZ4 != lz4 {
		t.Errorf("segment stored with %q (store's lz4 %v), want %q", method, s.segmentLZ4, want)
	}
	var got []byte
	if err := s.pool.QueryRow(ctx, `SELECT bytes FROM sync_segments WHERE segment_id = $1`, id).Scan(&got); err != nil || !bytes.Equal(got, b) {
		t.Errorf("segment read back: %d bytes, %v", len(got), err)
	}
}
