package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The segment store (store.SegmentStore) in the database: one
// sync_segments row per content address, holding the bytes, and one
// sync_segment_publications row per publication (migrations/
// 002_segments_blobs.sql). Every process that opens the database file
// serves every segment, and a restart keeps the segments in flight.
// Publications go through the single writer, like every write.

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

// optText is a *string as a bind argument: NULL when nil.
func optText(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func optOf(n nullString) *string {
	if !n.Valid {
		return nil
	}
	v := n.String
	return &v
}

const sqlPublishSegmentPublication = `INSERT INTO sync_segment_publications(segment_id, context, partition, log_epoch,
  tbl, schema_version, media_type, scope_digest, as_of_commit_seq, row_cursor, next_row_cursor, row_count,
  created_at_ms, expires_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(segment_id, context) DO UPDATE SET expires_at_ms = max(expires_at_ms, excluded.expires_at_ms)`

// PublishSegment implements store.SegmentStore. A segment stored as a
// body (PublishSegmentBody) is a stored segment too: it gains the
// publication, and its bytes are not stored again.
func (g segmentStore) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	return g.publish(ctx, id, pub, b != nil, int64(len(b)), func(c *conn) error {
		return c.exec(`INSERT INTO sync_segments(segment_id, partition, log_epoch, tbl, schema_version, media_type,
  scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor, byte_length, created_at_ms, expires_at_ms, bytes)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, id, pub.Partition, pub.LogEpoch, pub.Table, pub.SchemaVersion, mediaName(pub.MediaType),
			pub.ScopeDigest, pub.AsOfCommitSeq, pub.RowCount, optText(pub.RowCursor), optText(pub.NextRowCursor),
			len(b), pub.CreatedAtMs, pub.ExpiresAtMs, b)
	})
}

var _ store.SegmentBodyStore = segmentStore{}

// PublishSegmentBody implements store.SegmentBodyStore: the body goes to
// sync_segment_bodies, which processes that do not know bodies never read
// (migrations/004).
func (g segmentStore) PublishSegmentBody(ctx context.Context, id string, plainLength int64, enc string, body []byte, pub store.SegmentPublication) error {
	if enc != store.SegmentBodyZstd {
		return fmt.Errorf("publish segment %s: unknown content coding %q", id, enc)
	}
	return g.publish(ctx, id, pub, true, plainLength, func(c *conn) error {
		return c.exec(`INSERT INTO sync_segment_bodies(segment_id, partition, log_epoch, tbl, schema_version, media_type,
  scope_digest, as_of_commit_seq, row_count, row_cursor, next_row_cursor, byte_length, created_at_ms, expires_at_ms,
  content_encoding, body)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, id, pub.Partition, pub.LogEpoch, pub.Table, pub.SchemaVersion, mediaName(pub.MediaType),
			pub.ScopeDigest, pub.AsOfCommitSeq, pub.RowCount, optText(pub.RowCursor), optText(pub.NextRowCursor),
			plainLength, pub.CreatedAtMs, pub.ExpiresAtMs, enc, body)
	})
}

// publish extends the stored segment id (as bytes or as a body) or, when
// there is none and the caller has the segment (has), stores it with
// insert; then it records pub. length is the segment's length in bytes,
// checked against the stored one.
func (g segmentStore) publish(ctx context.Context, id string, pub store.SegmentPublication, has bool, length int64, insert func(*conn) error) error {
	return g.s.w.do(ctx, func(ctx context.Context, c *conn) error {
		var n int64
		table := "sync_segments"
		err := c.queryRow(`SELECT byte_length, 'sync_segments' FROM sync_segments WHERE segment_id=?
UNION ALL SELECT byte_length, 'sync_segment_bodies' FROM sync_segment_bodies WHERE segment_id=? LIMIT 1`, id, id).Scan(&n, &table)
		switch {
		case errors.Is(err, errNoRows):
			if !has {
				return store.ErrNotFound
			}
			if err := insert(c); err != nil {
				return fmt.Errorf("publish segment: %w", err)
			}
		case err != nil:
			return fmt.Errorf("publish segment: %w", err)
		default:
			if has && n != length {
				return fmt.Errorf("publish segment %s: %d bytes stored under the id, %d published: a hash collision", id, n, length)
			}
			if err := c.exec("UPDATE "+table+" SET expires_at_ms = max(expires_at_ms, ?) WHERE segment_id=?", pub.ExpiresAtMs, id); err != nil {
				return fmt.Errorf("publish segment: %w", err)
			}
		}
		if err := c.exec(sqlPublishSegmentPublication, id, pub.ContextKey(), pub.Partition, pub.LogEpoch, pub.Table,
			pub.SchemaVersion, mediaName(pub.MediaType), pub.ScopeDigest, pub.AsOfCommitSeq, optText(pub.RowCursor),
			optText(pub.NextRowCursor), pub.RowCount, pub.CreatedAtMs, pub.ExpiresAtMs); err != nil {
			return fmt.Errorf("publish segment: publication: %w", err)
		}
		return nil
	})
}

const segmentPublicationColumns = `partition, log_epoch, tbl, schema_version, media_type, scope_digest, as_of_commit_seq,
  row_cursor, next_row_cursor, row_count, created_at_ms, expires_at_ms`

func scanPublication(r scanner) (store.SegmentPublication, error) {
	var (
		p          store.SegmentPublication
		media      string
		cur, next  nullString
		schemaVers int64
	)
	if err := r.Scan(&p.Partition, &p.LogEpoch, &p.Table, &schemaVers, &media, &p.ScopeDigest, &p.AsOfCommitSeq,
		&cur, &next, &p.RowCount, &p.CreatedAtMs, &p.ExpiresAtMs); err != nil {
		return p, err
	}
	p.SchemaVersion = int32(schemaVers)
	p.RowCursor, p.NextRowCursor = optOf(cur), optOf(next)
	var err error
	p.MediaType, err = mediaOf(media)
	return p, err
}

// Segment implements store.SegmentStore. A segment row without any
// publication row (one the reference's segment store wrote) is read as
// the one publication its own columns hold. A segment stored as a body
// is decoded.
func (g segmentStore) Segment(ctx context.Context, id string) (store.Segment, error) {
	seg, err := g.SegmentBody(ctx, id)
	if err != nil || seg.Encoding == "" {
		return seg, err
	}
	if seg.Bytes, err = store.DecodeSegmentBody(seg.Encoding, seg.Bytes, seg.ByteLength); err != nil {
		return store.Segment{}, fmt.Errorf("segment %s: %w", id, err)
	}
	seg.Encoding = ""
	return seg, nil
}

// SegmentBody implements store.SegmentBodyStore. Of a segment stored both
// ways (bytes by a process without bodies, a body by one with), the body.
func (g segmentStore) SegmentBody(ctx context.Context, id string) (store.Segment, error) {
	seg := store.Segment{ID: id}
	err := g.s.readTx(ctx, func(c *conn) error {
		table := "sync_segment_bodies"
		read := `SELECT body, content_encoding, byte_length, 'sync_segment_bodies' FROM sync_segment_bodies WHERE segment_id=?1
UNION ALL SELECT bytes, '', byte_length, 'sync_segments' FROM sync_segments WHERE segment_id=?1 LIMIT 1`
		if g.s.noSegmentBodies {
			read = `SELECT bytes, '', byte_length, 'sync_segments' FROM sync_segments WHERE segment_id=?1`
		}
		if err := c.queryRow(read, id).Scan(&seg.Bytes, &seg.Encoding, &seg.ByteLength, &table); err != nil {
			if errors.Is(err, errNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		rows, err := c.query("SELECT "+segmentPublicationColumns+" FROM sync_segment_publications WHERE segment_id=? ORDER BY created_at_ms, context", id)
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
			p, err := scanPublication(c.queryRow("SELECT "+segmentPublicationColumns+" FROM "+table+" WHERE segment_id=?", id))
			if err != nil {
				return err
			}
			seg.Publications = []store.SegmentPublication{p}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Segment{}, err
		}
		return store.Segment{}, fmt.Errorf("segment: %w", err)
	}
	return seg, nil
}

// FindSegment implements store.SegmentStore.
func (g segmentStore) FindSegment(ctx context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	var rec store.SegmentRecord
	err := g.s.read(ctx, func(c *conn) error {
		bodies := "sync_segment_bodies"
		if g.s.noSegmentBodies {
			bodies = "(SELECT NULL AS segment_id, NULL AS byte_length WHERE 0)"
		}
		r := c.queryRow(`SELECT p.segment_id, coalesce(s.byte_length, b.byte_length), `+prefixed("p.", segmentPublicationColumns)+`
FROM sync_segment_publications p LEFT JOIN sync_segments s ON s.segment_id = p.segment_id
  LEFT JOIN `+bodies+` b ON b.segment_id = p.segment_id
WHERE (s.segment_id IS NOT NULL OR b.segment_id IS NOT NULL) AND p.partition=? AND p.tbl=? AND p.scope_digest=? AND p.as_of_commit_seq=? AND p.log_epoch=? AND p.schema_version=?
  AND p.media_type=? AND p.row_cursor IS NULL AND p.expires_at_ms > ?
ORDER BY p.expires_at_ms DESC LIMIT 1`, key.Partition, key.Table, key.ScopeDigest, key.AsOfCommitSeq, key.LogEpoch,
			key.SchemaVersion, mediaName(key.MediaType), nowMs)
		var (
			p     store.SegmentPublication
			media string
			cur   nullString
			next  nullString
			sv    int64
		)
		if err := r.Scan(&rec.ID, &rec.ByteLength, &p.Partition, &p.LogEpoch, &p.Table, &sv, &media, &p.ScopeDigest,
			&p.AsOfCommitSeq, &cur, &next, &p.RowCount, &p.CreatedAtMs, &p.ExpiresAtMs); err != nil {
			if errors.Is(err, errNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		p.SchemaVersion, p.RowCursor, p.NextRowCursor = int32(sv), optOf(cur), optOf(next)
		var err error
		p.MediaType, err = mediaOf(media)
		rec.Publication = p
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		err = fmt.Errorf("find segment: %w", err)
	}
	return rec, err
}

// prefixed qualifies each column of a comma-separated list.
func prefixed(prefix, cols string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(cols); i++ {
		ch := cols[i]
		if start && ch != ' ' && ch != '\n' {
			out = append(out, prefix...)
			start = false
		}
		out = append(out, ch)
		if ch == ',' {
			start = true
		}
	}
	return string(out)
}

// sweepBatch bounds the rows one sweep transaction deletes, so that the
// single writer is never held long.
const sweepBatch = 500

// SweepSegments implements store.SegmentStore, in transactions of at most
// sweepBatch segments.
func (g segmentStore) SweepSegments(ctx context.Context, beforeMs int64) (store.SegmentSweep, error) {
	var out store.SegmentSweep
	for {
		var n int64
		err := g.s.w.do(ctx, func(ctx context.Context, c *conn) error {
			pubs, err := c.execChanges(`DELETE FROM sync_segment_publications WHERE rowid IN (
  SELECT rowid FROM sync_segment_publications WHERE expires_at_ms < ? LIMIT ?)`, beforeMs, sweepBatch)
			if err != nil {
				return err
			}
			var bytes, segs int64
			for _, table := range []string{"sync_segments", "sync_segment_bodies"} {
				var b int64
				if err := c.queryRow(`SELECT coalesce(sum(byte_length), 0) FROM (SELECT byte_length FROM `+table+` s
  WHERE s.expires_at_ms < ? AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
  LIMIT ?)`, beforeMs, sweepBatch).Scan(&b); err != nil {
					return err
				}
				n, err := c.execChanges(`DELETE FROM `+table+` WHERE segment_id IN (SELECT segment_id FROM `+table+` s
  WHERE s.expires_at_ms < ? AND NOT EXISTS (SELECT 1 FROM sync_segment_publications p WHERE p.segment_id = s.segment_id)
  LIMIT ?)`, beforeMs, sweepBatch)
				if err != nil {
					return err
				}
				bytes, segs = bytes+b, segs+n
			}
			out.Publications += pubs
			out.Segments += segs
			out.Bytes += bytes
			n = pubs + segs
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("sweep segments: %w", err)
		}
		if n == 0 {
			return out, nil
		}
	}
}

// SegmentStats implements store.SegmentStore.
func (g segmentStore) SegmentStats(ctx context.Context) (store.SegmentStats, error) {
	var st store.SegmentStats
	err := g.s.readTx(ctx, func(c *conn) error {
		// A segment stored both ways (bytes and a body) counts once.
		q := `SELECT count(*), coalesce(sum(byte_length), 0) FROM (SELECT byte_length FROM sync_segments
  UNION ALL SELECT byte_length FROM sync_segment_bodies b
  WHERE NOT EXISTS (SELECT 1 FROM sync_segments s WHERE s.segment_id = b.segment_id))`
		if g.s.noSegmentBodies {
			q = "SELECT count(*), coalesce(sum(byte_length), 0) FROM sync_segments"
		}
		if err := c.queryRow(q).Scan(&st.Segments, &st.Bytes); err != nil {
			return err
		}
		return c.queryRow("SELECT count(*) FROM sync_segment_publications").Scan(&st.Publications)
	})
	if err != nil {
		return st, fmt.Errorf("segment stats: %w", err)
	}
	return st, nil
}
