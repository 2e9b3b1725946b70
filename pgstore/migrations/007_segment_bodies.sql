-- Segment bodies (store.SegmentBodyStore): a segment kept as the body a
-- download serves (content_encoding 'zstd': a zstd frame of the segment's
-- bytes, byte_length of them), which a rows page of 100,000-row bootstrap
-- shrinks from about 627 KB to about 18 KB, so that publishing it writes
-- (binds, TOASTs, logs) the small body. The columns are sync_segments'
-- with the coding; publications stay in sync_segment_publications.
--
-- A table of its own, not a column or a new media type of sync_segments,
-- so that a server process that does not know bodies (an older syncgo
-- during a rolling deploy, the reference) never reads one as a segment's
-- bytes: it does not find the segment (sync.not_found, as for a segment
-- its store forgot) and its sweeps leave the table alone. See COMPAT.md.
CREATE TABLE IF NOT EXISTS sync_segment_bodies(
  segment_id TEXT PRIMARY KEY,
  partition TEXT NOT NULL,
  log_epoch TEXT NOT NULL,
  tbl TEXT NOT NULL,
  schema_version INTEGER NOT NULL,
  media_type TEXT NOT NULL,
  scope_digest TEXT NOT NULL,
  as_of_commit_seq BIGINT NOT NULL,
  row_count BIGINT NOT NULL,
  row_cursor TEXT,
  next_row_cursor TEXT,
  byte_length BIGINT NOT NULL,
  created_at_ms BIGINT NOT NULL,
  expires_at_ms BIGINT NOT NULL,
  content_encoding TEXT NOT NULL,
  body BYTEA NOT NULL
);

CREATE INDEX IF NOT EXISTS sync_segment_bodies_by_expiry
  ON sync_segment_bodies(expires_at_ms);
