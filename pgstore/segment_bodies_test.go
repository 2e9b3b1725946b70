package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The statements of the segment store of the release before segment
// bodies (the reads and the publication of an older process in a rolling
// deploy), verbatim.
const (
	oldSegmentBytes = `SELECT bytes FROM sync_segments WHERE segment_id = $1`
	oldFindSegment  = `SELECT p.segment_id, s.byte_length
FROM sync_segment_publications p JOIN sync_segments s ON s.segment_id = p.segment_id
WHERE p.partition = $1 AND p.tbl = $2 AND p.row_cursor IS NULL`
	oldExtendSegment = `UPDATE sync_segments SET expires_at_ms = GREATEST(expires_at_ms, $2)
WHERE segment_id = $1 RETURNING byte_length`
	oldInsertSegment = `INSERT INTO sync_segments(segment_id, partition, log_epoch, tbl, schema_version, media_type,
  scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor, byte_length, created_at_ms, expires_at_ms, bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (segment_id) DO UPDATE SET expires_at_ms = GREATEST(sync_segments.expires_at_ms, EXCLUDED.expires_at_ms)
RETURNING byte_length`
)

func zstdBody(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// TestSegmentBodiesUnseenByOlderProcesses: a segment stored as its body
// is invisible to the statements of a process that does not know bodies,
// so such a process never serves a body as a segment's bytes (it answers
// sync.not_found, as for a forgotten segment, and the client pulls
// again); what it stores itself under the same address is read by both.
func TestSegmentBodiesUnseenByOlderProcesses(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	seg := s.SegmentStore().(store.SegmentBodyStore)
	b := []byte(strings.Repeat("a rows page of a bootstrap ", 4000))
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	body := zstdBody(t, b)
	img := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
		MediaType: wire.MediaSQLite, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 1, CreatedAtMs: 1, ExpiresAtMs: 1 << 40}
	if err := seg.PublishSegmentBody(ctx, id, int64(len(b)), store.SegmentBodyZstd, body, img); err != nil {
		t.Fatal(err)
	}
	var stored int64
	if err := s.pool.QueryRow(ctx, `SELECT octet_length(body) FROM sync_segment_bodies WHERE segment_id = $1`, id).Scan(&stored); err != nil || stored != int64(len(body)) {
		t.Fatalf("body stored: %d bytes, %v; want the %d-byte body", stored, err, len(body))
	}

	var got []byte
	if err := s.pool.QueryRow(ctx, oldSegmentBytes, id).Scan(&got); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("an older process's read of a body: %d bytes, %v; want no row", len(got), err)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, oldFindSegment, "p", "tasks").Scan(&id, &n); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("an older process found an image stored as a body: %v", err)
	}

	// The older process publishes the same segment as its bytes (it did
	// not find it): stored beside the body, and read right by both.
	if err := s.pool.QueryRow(ctx, oldExtendSegment, id, int64(1<<40)).Scan(&n); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("an older process's refresh matched a body: %v", err)
	}
	if err := s.pool.QueryRow(ctx, oldInsertSegment, id, "p", "e", "tasks", 1, "sqlite", "d", 1, 1, nil, nil,
		len(b), 1, int64(1<<40), b).Scan(&n); err != nil || n != int64(len(b)) {
		t.Fatalf("an older process's insert: %d, %v", n, err)
	}
	if err := s.pool.QueryRow(ctx, oldSegmentBytes, id).Scan(&got); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("the older process reads back %d bytes, %v", len(got), err)
	}
	if got, err := seg.Segment(ctx, id); err != nil || !bytes.Equal(got.Bytes, b) {
		t.Fatalf("Segment with both stored: %d bytes, %v", len(got.Bytes), err)
	}
	st, err := seg.SegmentStats(ctx)
	if err != nil || st.Segments != 1 || st.Bytes != int64(len(b)) {
		t.Fatalf("SegmentStats with both stored = %+v, %v; want one segment of %d bytes", st, err, len(b))
	}
	// A sweep (by either) deletes both once the publications are gone.
	if _, err := s.pool.Exec(ctx, `UPDATE sync_segment_publications SET expires_at_ms = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE sync_segments SET expires_at_ms = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE sync_segment_bodies SET expires_at_ms = 0`); err != nil {
		t.Fatal(err)
	}
	sw, err := seg.SweepSegments(ctx, 1)
	if err != nil || sw.Segments != 2 || sw.Publications != 1 {
		t.Fatalf("SweepSegments = %+v, %v; want the publication and both stored forms", sw, err)
	}
}

// TestSegmentBodiesDamaged: a body that does not decode to its stored
// length fails the read instead of serving other bytes.
func TestSegmentBodiesDamaged(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	seg := s.SegmentStore().(store.SegmentBodyStore)
	b := []byte(strings.Repeat("x", 5000))
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
		MediaType: wire.MediaRows, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 1, CreatedAtMs: 1, ExpiresAtMs: 2}
	if err := seg.PublishSegmentBody(ctx, id, int64(len(b)), store.SegmentBodyZstd, zstdBody(t, b[:4000]), pub); err != nil {
		t.Fatal(err)
	}
	if got, err := seg.Segment(ctx, id); err == nil {
		t.Fatalf("a body of 4000 bytes stored for 5000 was read as %d bytes", len(got.Bytes))
	}
	if _, err := s.pool.Exec(ctx, `UPDATE sync_segment_bodies SET content_encoding = 'br'`); err != nil {
		t.Fatal(err)
	}
	if got, err := seg.Segment(ctx, id); err == nil {
		t.Fatalf("a body in an unknown coding was read as %d bytes", len(got.Bytes))
	}
}

// TestSegmentBodiesReadOnlyWithoutTable: a read-only store opened on a
// database without sync_segment_bodies (written by a release before it)
// reads its segments.
func TestSegmentBodiesReadOnlyWithoutTable(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	w := openIn(t, name, Config{})
	ctx := context.Background()
	ensure(t, w, testSchema(t, 1))
	b := []byte(strings.Repeat("y", 3000))
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	pub := store.SegmentPublication{Partition: "p", LogEpoch: "e", Table: "tasks", SchemaVersion: 1,
		MediaType: wire.MediaSQLite, ScopeDigest: "d", AsOfCommitSeq: 1, RowCount: 1, CreatedAtMs: 1, ExpiresAtMs: 1 << 40}
	if err := w.SegmentStore().PublishSegment(ctx, id, b, pub); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `DROP TABLE sync_segment_bodies`); err != nil {
		t.Fatal(err)
	}
	ro := openIn(t, name, Config{ReadOnly: true})
	if err := ro.EnsureSchema(ctx, testSchema(t, 1)); err != nil {
		t.Fatalf("EnsureSchema of a read-only store without sync_segment_bodies: %v", err)
	}
	if ro.segmentBodies {
		t.Fatal("the read-only store saw a table that is not there")
	}
	rs := ro.SegmentStore().(store.SegmentBodyStore)
	if got, err := rs.SegmentBody(ctx, id); err != nil || got.Encoding != "" || !bytes.Equal(got.Bytes, b) {
		t.Fatalf("SegmentBody without the table: %d bytes, %v", len(got.Bytes), err)
	}
	if rec, err := rs.FindSegment(ctx, store.KeyOf(pub), 2); err != nil || rec.ID != id || rec.ByteLength != 3000 {
		t.Fatalf("FindSegment without the table: %+v, %v", rec, err)
	}
	if st, err := rs.SegmentStats(ctx); err != nil || st.Segments != 1 {
		t.Fatalf("SegmentStats without the table: %+v, %v", st, err)
	}
}
