package sqlitestore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestSegmentBodiesReadOnlyWithoutTable: a read-only store opened on a
// database of a release before sync_segment_bodies reads the segments it
// holds (stored as bytes).
func TestSegmentBodiesReadOnlyWithoutTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	w := openPath(t, path)
	b := []byte(strings.Repeat("y", 3000))
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
		MediaType: wire.MediaSQLite, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 1, CreatedAtMs: 1, ExpiresAtMs: 1 << 40}
	if err := w.SegmentStore().PublishSegment(ctx, id, b, pub); err != nil {
		t.Fatal(err)
	}
	if err := w.ExecRaw(ctx, `DROP TABLE sync_segment_bodies`); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(ctx, Config{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if !ro.noSegmentBodies {
		t.Fatal("the read-only store saw a table that is not there")
	}
	rs := ro.SegmentStore().(store.SegmentBodyStore)
	if got, err := rs.SegmentBody(ctx, id); err != nil || got.Encoding != "" || !bytes.Equal(got.Bytes, b) {
		t.Fatalf("SegmentBody without the table: %d bytes, %v", len(got.Bytes), err)
	}
	if got, err := rs.Segment(ctx, id); err != nil || !bytes.Equal(got.Bytes, b) {
		t.Fatalf("Segment without the table: %d bytes, %v", len(got.Bytes), err)
	}
	if rec, err := rs.FindSegment(ctx, store.KeyOf(pub), 2); err != nil || rec.ID != id || rec.ByteLength != 3000 {
		t.Fatalf("FindSegment without the table: %+v, %v", rec, err)
	}
	if st, err := rs.SegmentStats(ctx); err != nil || st.Segments != 1 || st.Bytes != 3000 {
		t.Fatalf("SegmentStats without the table: %+v, %v", st, err)
	}
	// A read-only store on a database with the table sees it.
	ro2, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "new.db")})
	if err != nil {
		t.Fatal(err)
	}
	ro2.Close()
	ro3, err := Open(ctx, Config{Path: filepath.Join(filepath.Dir(ro2.path), "new.db"), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro3.Close()
	if ro3.noSegmentBodies {
		t.Fatal("a read-only store missed sync_segment_bodies")
	}
}
