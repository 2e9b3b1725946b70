-- Segments kept as the body a download serves (store.SegmentBodyStore;
-- content_encoding 'zstd', byte_length the segment's own length): the
-- columns of sync_segments and the coding, in a table of their own so that
-- a process that does not know bodies never reads one as a segment's
-- bytes (pgstore/migrations/007_segment_bodies.sql).
CREATE TABLE IF NOT EXISTS sync_segment_bodies(
  segment_id TEXT PRIMARY KEY, partition TEXT NOT NULL,
  log_epoch TEXT NOT NULL,
  tbl TEXT NOT NULL, schema_version INTEGER NOT NULL,
  media_type TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of_commit_seq INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT,
  byte_length INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, content_encoding TEXT NOT NULL, body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sync_segment_bodies_by_expiry ON sync_segment_bodies(expires_at_ms);
