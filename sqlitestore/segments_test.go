package sqlitestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The database file stays bounded under a steady stream of new segments:
// swept segments free their pages, which later segments reuse. 60 windows
// of 10 incompressible 64 KiB segments, one window per simulated 10
// minutes with a 1 h TTL, a sweep after each; the file after 60 windows
// is compared with the file after 12.
func TestSegmentStorageOnDiskBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 38 MiB of segments")
	}
	path := filepath.Join(t.TempDir(), "sync.db")
	// Checkpoints at SQLite's 1000 pages: the default 8000 would let the
	// WAL alone grow to most of the stream's 37.5 MiB, and this is about
	// the database file reusing the pages the sweeps free.
	s, err := Open(context.Background(), Config{Path: path, WALAutocheckpoint: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seg := s.SegmentStore()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const (
		stepMs = 10 * 60 * 1000
		ttlMs  = 60 * 60 * 1000
	)
	size := func() int64 {
		var n int64
		for _, suffix := range []string{"", "-wal"} {
			if fi, err := os.Stat(path + suffix); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	var at12 int64
	for step := range 60 {
		now := int64(step) * stepMs
		for i := range 10 {
			b := make([]byte, 64<<10)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			sum := sha256.Sum256(b)
			pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
				MediaType: wire.MediaRows, ScopeDigest: fmt.Sprint("d", step, "-", i), AsOfCommitSeq: 1, RowCount: 1,
				CreatedAtMs: now, ExpiresAtMs: now + ttlMs}
			if err := seg.PublishSegment(ctx, "sha256:"+hex.EncodeToString(sum[:]), b, pub); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := seg.SweepSegments(ctx, now-stepMs); err != nil {
			t.Fatal(err)
		}
		if step == 11 {
			at12 = size()
		}
	}
	end := size()
	t.Logf("database file and WAL: %.1f MiB after 12 windows, %.1f MiB after 60 (%.1f MiB written)",
		float64(at12)/(1<<20), float64(end)/(1<<20), 60*10*64.0/1024)
	if end > at12*3/2 {
		t.Fatalf("the database grew from %d to %d bytes under a steady stream; want it bounded", at12, end)
	}
}
