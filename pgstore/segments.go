package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The segment store (store.SegmentStore) in the database: one
// sync_segments row per content address, holding the bytes, and one
// sync_segment_publications row per publication (migrations/
// 004_segments_blobs.sql). Every server process on the database serves
// every segment, and a restart keeps the segments in flight.
//
// A publication locks its segment's row (the UPDATE that extends its
// expiry, or the INSERT that creates it) before it records the
// publication, in one transaction; the sweep deletes a segment only while
// its row's own expiry is past the cutoff, which Postgres checks again
// after waiting for that lock. So a segment that gains a live publication
// is never swept, and two publishers of one content address cannot lose
// either's publication (each is its own row, merged with ON CONFLICT).

var _ store.SegmentStorer = (*Store)(nil)

// SegmentStore returns the segment store kept in the store's database.
func (s *Store) SegmentStore() store.SegmentStore { return segmentStore{s} }

type segmentStore struct{ s *Store }

// mediaName is the media_type text of the reference's segment store.
func mediaName(m wire.MediaType) string {
	if m == wire.MediaSQLite {
		return "sqlite"
	}
	return "rows"
}

func mediaOf(name string) (wire.MediaType, error) {
	switch name {
	case "rows":
		return wire.MediaRows, nil
	case "sqlite":
		return wire.MediaSQLite, nil
	}
	return 0, fmt.Errorf("unknown segment media type %q", name)
}

const (
	sqlExtendSegment = `UPDATE sync_segments SET expires_at_ms = GREATEST(expires_at_ms, $2)
WHERE segment_id = $1 RETURNING byte_length`
	// extendEither extends segment $1 to expiry $2 under either table
	// (bodies: migrations/007): s and b return the stored lengths; both
	// rows are locked when both exist (always in this order).
	extendEither = `s AS (
  UPDATE sync_segments SET expires_at_ms = GREATEST(expires_at_ms, $2) WHERE segment_id = $1 RETURNING byte_length),
b AS (
  UPDATE sync_segment_bodies SET expires_at_ms = GREATEST(expires_at_ms, $2) WHERE segment_id = $1 RETURNING byte_length)`
	// sqlExtendEither is extendEither in one statement.
	sqlExtendEither = `WITH ` + extendEither + `
SELECT byte_length FROM s UNION ALL SELECT byte_length FROM b LIMIT 1`
	sqlInsertSegment = `INSERT INTO sync_segments(segment_id, partition, log_epoch, tbl, schema_version, media_type,
  scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor, byte_length, created_at_ms, expires_at_ms, bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (segment_id) DO UPDATE SET expires_at_ms = GREATEST(sync_segments.expires_at_ms, EXCLUDED.expires_at_ms)
RETURNING byte_length`
	sqlSegmentLZ4     = `SET LOCAL default_toast_compression = lz4`
	sqlPublishSegment = `INSERT INTO sync_segment_publications(segment_id, context, partition, log_epoch, tbl,
  schema_version, media_type, scope_digest, as_of_commit_seq, row_cursor, next_row_cursor, row_count,
  created_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (segment_id, context) DO UPDATE
  SET expires_at_ms = GREATEST(sync_segment_publications.expires_at_ms, EXCLUDED.expires_at_ms)`
	// sqlPublishBody is PublishSegmentBody in one statement (one round
	// trip, no transaction of statements): the segment's rows under
	// either table are extended and locked as sqlExtendEither does (in
	// that order), the body is inserted when neither exists, and the
	// publication is recorded when the stored length is the one
	// published; it returns the stored length. The sub-statements share
	// a snapshot, and the insert reads the extends' results, so it runs
	// only when they found nothing (a concurrent insert of the same body
	// meets its ON CONFLICT, as publish's does). Parameters: id, expiry,
	// then the body's columns in order, the body, the publication's
	// context.
	sqlPublishBody = `WITH ` + extendEither + `,
i AS (
  INSERT INTO sync_segment_bodies(segment_id, expires_at_ms, partition, log_epoch, tbl, schema_version, media_type,
    scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor, byte_length, created_at_ms,
    content_encoding, body)
  SELECT $1::text, $2::bigint, $3::text, $4::text, $5::text, $6::integer, $7::text, $8::text, $9::bigint, $10::bigint,
    $11::text, $12::text, $13::bigint, $14::bigint, $15::text, $16::bytea
   WHERE NOT EXISTS (SELECT 1 FROM s) AND NOT EXISTS (SELECT 1 FROM b)
  ON CONFLICT (segment_id) DO UPDATE SET expires_at_ms = GREATEST(sync_segment_bodies.expires_at_ms, EXCLUDED.expires_at_ms)
  RETURNING byte_length),
n AS (SELECT byte_length FROM s UNION ALL SELECT byte_length FROM b UNION ALL SELECT byte_length FROM i LIMIT 1),
p AS (
  INSERT INTO sync_segment_publications(segment_id, expires_at_ms, context, partition, log_epoch, tbl,
    schema_version, media_type, scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor,
    created_at_ms)
  SELECT $1::text, $2::bigint, $17::text, $3::text, $4::text, $5::text, $6::integer, $7::text, $8::text, $9::bigint,
    $10::bigint, $11::text, $12::text, $14::bigint FROM n WHERE n.byte_length = $13::bigint
  ON CONFLICT (segment_id, context) DO UPDATE
    SET expires_at_ms = GREATEST(sync_segment_publications.expires_at_ms, EXCLUDED.expires_at_ms))
SELECT byte_length FROM n`
	segmentPublicationColumns = `partition, log_epoch, tbl, schema_version, media_type, scope_digest, as_of_commit_seq,
  row_cursor, next_row_cursor, row_count, created_at_ms, expires_at_ms`
)

// PublishSegment implements store.SegmentStore. A segment stored as a
// body (PublishSegmentBody) is a stored segment too: it gains the
// publication, and its bytes are not stored again.
func (g segmentStore) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	if err := g.s.checkWrite(); err != nil {
		return err
	}
	return g.publish(ctx, id, pub, b != nil, int64(len(b)), func(tx pgx.Tx) (int64, error) {
		if g.s.segmentLZ4 {
			// Postgres compresses the bytes it stores out of line;
			// pglz took 20-30 ms of the backend per 570 KB segment
			// (a cold 100,000-row bootstrap writes ten), lz4 a
			// fifth of it, for 15 % more bytes stored.
			if _, err := tx.Exec(ctx, sqlSegmentLZ4); err != nil {
				return 0, err
			}
		}
		var n int64
		err := tx.QueryRow(ctx, sqlInsertSegment, id, pub.Partition, pub.LogEpoch, pub.Table, pub.SchemaVersion,
			mediaName(pub.MediaType), pub.ScopeDigest, pub.AsOfCommitSeq, pub.RowCount, pub.RowCursor,
			pub.NextRowCursor, len(b), pub.CreatedAtMs, pub.ExpiresAtMs, b).Scan(&n)
		return n, err
	})
}

var _ store.SegmentBodyStore = segmentStore{}

// PublishSegmentBody implements store.SegmentBodyStore: the body goes to
// sync_segment_bodies, which server processes that do not know bodies
// never read (migrations/007).
func (g segmentStore) PublishSegmentBody(ctx context.Context, id string, plainLength int64, enc string, body []byte, pub store.SegmentPublication) error {
	if err := g.s.checkWrite(); err != nil {
		return err
	}
	if enc != store.SegmentBodyZstd {
		return fmt.Errorf("publish segment %s: unknown content coding %q", id, enc)
	}
	if !g.s.segmentBodies {
		return fmt.Errorf("publish segment %s: the database has no sync_segment_bodies", id)
	}
	var n int64
	err := g.s.pool.QueryRow(ctx, sqlPublishBody, id, pub.ExpiresAtMs, pub.Partition, pub.LogEpoch, pub.Table, pub.SchemaVersion,
		mediaName(pub.MediaType), pub.ScopeDigest, pub.AsOfCommitSeq, pub.RowCount, pub.RowCursor,
		pub.NextRowCursor, plainLength, pub.CreatedAtMs, enc, body, pub.ContextKey()).Scan(&n)
	switch {
	case err != nil:
		return fmt.Errorf("publish segment %s: %w", id, err)
	case n != plainLength:
		return fmt.Errorf("publish segment %s: %d bytes stored under the id, %d published: a hash collision", id, n, plainLength)
	}
	return nil
}

// publish extends the stored segment id (as bytes or as a body) or, when
// there is none and the caller has the segment (has), stores it with
// insert; then it records pub. length is the segment's length in bytes,
// checked against the stored one.
func (g segmentStore) publish(ctx context.Context, id string, pub store.SegmentPublication, has bool, length int64, insert func(pgx.Tx) (int64, error)) error {
	extend := sqlExtendSegment
	if g.s.segmentBodies {
		extend = sqlExtendEither
	}
	err := pgx.BeginFunc(ctx, g.s.pool, func(tx pgx.Tx) error {
		var n int64
		err := tx.QueryRow(ctx, extend, id, pub.ExpiresAtMs).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			if !has {
				return store.ErrNotFound
			}
			n, err = insert(tx)
		}
		if err != nil {
			return err
		}
		if has && n != length {
			return fmt.Errorf("%d bytes stored under the id, %d published: a hash collision", n, length)
		}
		_, err = tx.Exec(ctx, sqlPublishSegment, id, pub.ContextKey(), pub.Partition, pub.LogEpoch, pub.Table,
			pub.SchemaVersion, mediaName(pub.MediaType), pub.ScopeDigest, pub.AsOfCommitSeq, pub.RowCursor,
			pub.NextRowCursor, pub.RowCount, pub.CreatedAtMs, pub.ExpiresAtMs)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("publish segment %s: %w", id, err)
	}
	return err
}

func scanPublication(r pgx.Row, lead ...any) (store.SegmentPublication, error) {
	var (
		p     store.SegmentPublication
		media string
	)
	dest := append(lead, &p.Partition, &p.LogEpoch, &p.Table, &p.SchemaVersion, &media, &p.ScopeDigest,
		&p.AsOfCommitSeq, &p.RowCursor, &p.NextRowCursor, &p.RowCount, &p.CreatedAtMs, &p.ExpiresAtMs)
	if err := r.Scan(dest...); err != nil {
		return p, err
	}
	var err error
	p.MediaType, err = mediaOf(media)
	return p, err
}

// Segment implements store.SegmentStore. A segment row without any
// publication row (one another segment store wrote) is read as the one
// publication its own columns hold. A segment stored as a body is
// decoded.
func (g segmentStore) Segment(ctx context.Context, id string) (store.Segment, error) {
	return retry(g.s, ctx, "Segment", func() (store.Segment, error) { return g.segmentOnce(ctx, id) })
}

// segmentOnce is Segment, once (see "Lost connections", retry.go).
func (g segmentStore) segmentOnce(ctx context.Context, id string) (store.Segment, error) {
	seg, n, err := g.segment(ctx, id)
	if err != nil || seg.Encoding == "" {
		return seg, err
	}
	if seg.Bytes, err = store.DecodeSegmentBody(seg.Encoding, seg.Bytes, n); err != nil {
		return store.Segment{}, fmt.Errorf("segment %s: %w", id, err)
	}
	seg.Encoding = ""
	return seg, nil
}

// SegmentBody implements store.SegmentBodyStore.
func (g segmentStore) SegmentBody(ctx context.Context, id string) (store.Segment, error) {
	return retry(g.s, ctx, "SegmentBody", func() (store.Segment, error) { return g.segmentBodyOnce(ctx, id) })
}

// segmentBodyOnce is SegmentBody, once (see "Lost connections", retry.go).
func (g segmentStore) segmentBodyOnce(ctx context.Context, id string) (store.Segment, error) {
	seg, n, err := g.segment(ctx, id)
	seg.ByteLength = n
	return seg, err
}

const (
	sqlSegmentBytes = `SELECT bytes, '', byte_length FROM sync_segments WHERE segment_id = $1`
	// sqlSegmentBytesOrBody prefers the body, the smaller of the two when
	// both were stored (an older process stored the bytes too).
	sqlSegmentBytesOrBody = `SELECT body, content_encoding, byte_length FROM sync_segment_bodies WHERE segment_id = $1
UNION ALL ` + sqlSegmentBytes + ` LIMIT 1`
)

// segment reads a segment as stored, with its plain length.
func (g segmentStore) segment(ctx context.Context, id string) (store.Segment, int64, error) {
	if err := g.s.check(); err != nil {
		return store.Segment{}, 0, err
	}
	seg := store.Segment{ID: id}
	var length int64
	read, own := sqlSegmentBytes, "SELECT "+segmentPublicationColumns+" FROM sync_segments WHERE segment_id = $1"
	if g.s.segmentBodies {
		read = sqlSegmentBytesOrBody
		own = "SELECT " + segmentPublicationColumns + " FROM sync_segment_bodies WHERE segment_id = $1 UNION ALL " + own + " LIMIT 1"
	}
	err := pgx.BeginTxFunc(ctx, g.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, read, id).Scan(&seg.Bytes, &seg.Encoding, &length); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		rows, err := tx.Query(ctx, "SELECT "+segmentPublicationColumns+
			" FROM sync_segment_publications WHERE segment_id = $1 ORDER BY created_at_ms, context", id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scanPublication(rows)
			if err != nil {
				return err
			}
			seg.Publications = append(seg.Publications, p)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(seg.Publications) == 0 {
			p, err := scanPublication(tx.QueryRow(ctx, own, id))
			if err != nil {
				return err
			}
			seg.Publications = []store.SegmentPublication{p}
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Segment{}, 0, err
	case err != nil:
		return store.Segment{}, 0, fmt.Errorf("segment %s: %w", id, err)
	}
	return seg, length, nil
}

// FindSegment implements store.SegmentStore.
func (g segmentStore) FindSegment(ctx context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	return retry(g.s, ctx, "FindSegment", func() (store.SegmentRecord, error) { return g.findSegmentOnce(ctx, key, nowMs) })
}

// findSegmentOnce is FindSegment, once (see "Lost connections", retry.go).
func (g segmentStore) findSegmentOnce(ctx context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	var rec store.SegmentRecord
	if err := g.s.check(); err != nil {
		return rec, err
	}
	names := strings.Split(segmentPublicationColumns, ",")
	for i, n := range names {
		names[i] = "p." + strings.TrimSpace(n)
	}
	cols := strings.Join(names, ", ")
	from, stored := `SELECT p.segment_id, s.byte_length, `+cols+`
FROM sync_segment_publications p JOIN sync_segments s ON s.segment_id = p.segment_id`, "TRUE"
	if g.s.segmentBodies {
		stored = "(s.segment_id IS NOT NULL OR b.segment_id IS NOT NULL)"
		from = `SELECT p.segment_id, COALESCE(s.byte_length, b.byte_length), ` + cols + `
FROM sync_segment_publications p LEFT JOIN sync_segments s ON s.segment_id = p.segment_id
  LEFT JOIN sync_segment_bodies b ON b.segment_id = p.segment_id`
	}
	p, err := scanPublication(g.s.pool.QueryRow(ctx, from+`
WHERE `+stored+` AND p.partition = $1 AND p.tbl = $2 AND p.scope_digest = $3 AND p.as_of_commit_seq = $4 AND p.log_epoch = $5
  AND p.schema_version = $6 AND p.media_type = $7 AND p.row_cursor IS NULL AND p.expires_at_ms > $8
ORDER BY p.expires_at_ms DESC LIMIT 1`, key.Partition, key.Table, key.ScopeDigest, key.AsOfCommitSeq, key.LogEpoch,
		key.SchemaVersion, mediaName(key.MediaType), nowMs), &rec.ID, &rec.ByteLength)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return rec, store.ErrNotFound
	case err != nil:
		return rec, fmt.Errorf("find segment: %w", err)
	}
	rec.Publication = p
	return rec, nil
}

// sweepBatch bounds the rows one sweep statement deletes.
const sweepBatch = 500

const (
	sqlSweepPublications = `WITH d AS (
  DELETE FROM sync_segment_publications WHERE ctid IN (
    SELECT ctid FROM sync_segment_publications WHERE expires_at_ms < $1 LIMIT $2)
  RETURNING 1)
SELECT count(*) FROM d`
	sqlSweepSegments = `WITH d AS (
  DELETE FROM sync_segments s
  WHERE s.expires_at_ms < $1
    AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
    AND s.segment_id IN (
      SELECT c.segment_id FROM sync_segments c
      WHERE c.expires_at_ms < $1
        AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = c.segment_id)
      LIMIT $2)
  RETURNING s.byte_length)
SELECT count(*), COALESCE(sum(byte_length), 0)::bigint FROM d`
	sqlSweepBodies = `WITH d AS (
  DELETE FROM sync_segment_bodies s
  WHERE s.expires_at_ms < $1
    AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
    AND s.segment_id IN (
      SELECT c.segment_id FROM sync_segment_bodies c
      WHERE c.expires_at_ms < $1
        AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = c.segment_id)
      LIMIT $2)
  RETURNING s.byte_length)
SELECT count(*), COALESCE(sum(byte_length), 0)::bigint FROM d`
)

// SweepSegments implements store.SegmentStore, in statements of at most
// sweepBatch rows.
func (g segmentStore) SweepSegments(ctx context.Context, beforeMs int64) (store.SegmentSweep, error) {
	var out store.SegmentSweep
	if err := g.s.checkWrite(); err != nil {
		return out, err
	}
	for {
		var n int64
		if err := g.s.pool.QueryRow(ctx, sqlSweepPublications, beforeMs, sweepBatch).Scan(&n); err != nil {
			return out, fmt.Errorf("sweep segment publications: %w", err)
		}
		out.Publications += n
		if n < sweepBatch {
			break
		}
	}
	sweeps := []string{sqlSweepSegments}
	if g.s.segmentBodies {
		sweeps = append(sweeps, sqlSweepBodies)
	}
	for _, sweep := range sweeps {
		for {
			var n, b int64
			if err := g.s.pool.QueryRow(ctx, sweep, beforeMs, sweepBatch).Scan(&n, &b); err != nil {
				return out, fmt.Errorf("sweep segments: %w", err)
			}
			out.Segments += n
			out.Bytes += b
			if n == 0 {
				break
			}
		}
	}
	return out, nil
}

// SegmentStats implements store.SegmentStore.
func (g segmentStore) SegmentStats(ctx context.Context) (store.SegmentStats, error) {
	var st store.SegmentStats
	if err := g.s.check(); err != nil {
		return st, err
	}
	q := `SELECT (SELECT count(*) FROM sync_segments),
  (SELECT COALESCE(sum(byte_length), 0)::bigint FROM sync_segments),
  (SELECT count(*) FROM sync_segment_publications)`
	if g.s.segmentBodies {
		// A segment stored both ways (bytes by an older process, a body
		// by a newer one) counts once.
		q = `SELECT (SELECT count(*) FROM sync_segments) + (SELECT count(*) FROM sync_segment_bodies b
    WHERE NOT EXISTS (SELECT 1 FROM sync_segments s WHERE s.segment_id = b.segment_id)),
  (SELECT COALESCE(sum(byte_length), 0)::bigint FROM sync_segments) + (SELECT COALESCE(sum(byte_length), 0)::bigint
    FROM sync_segment_bodies b WHERE NOT EXISTS (SELECT 1 FROM sync_segments s WHERE s.segment_id = b.segment_id)),
  (SELECT count(*) FROM sync_segment_publications)`
	}
	err := g.s.pool.QueryRow(ctx, q).Scan(&st.Segments, &st.Bytes, &st.Publications)
	if err != nil {
		return st, fmt.Errorf("segment stats: %w", err)
	}
	return st, nil
}
