-- The blob reference index (§5.9.4) as the reference server's SQLite
-- storage declares it, and the tables of the segment store (§5.1) and the
-- blob store (§5.9.2) that the driver offers (SegmentStore, BlobStore).
-- Same rules as 001_core.sql: one CREATE statement per object, planned at
-- every open.
CREATE TABLE IF NOT EXISTS sync_blob_refs(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  blob_id TEXT NOT NULL,
  PRIMARY KEY(partition, tbl, row_id, blob_id)
);
CREATE INDEX IF NOT EXISTS sync_blob_refs_by_blob ON sync_blob_refs(partition, blob_id);
-- One row per content address, with the columns of the reference's
-- SqliteSegmentStore (its context columns hold the first publication,
-- expires_at_ms the latest expiry of any), and every publication in
-- sync_segment_publications, keyed by a canonical context string.
CREATE TABLE IF NOT EXISTS sync_segments(
  segment_id TEXT PRIMARY KEY, partition TEXT NOT NULL,
  log_epoch TEXT NOT NULL,
  tbl TEXT NOT NULL, schema_version INTEGER NOT NULL,
  media_type TEXT NOT NULL, scope_digest TEXT NOT NULL,
  as_of_commit_seq INTEGER NOT NULL, row_count INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT,
  byte_length INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
  expires_at_ms INTEGER NOT NULL, bytes BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sync_segments_by_expiry ON sync_segments(expires_at_ms);
CREATE TABLE IF NOT EXISTS sync_segment_publications(
  segment_id TEXT NOT NULL, context TEXT NOT NULL,
  partition TEXT NOT NULL, log_epoch TEXT NOT NULL, tbl TEXT NOT NULL,
  schema_version INTEGER NOT NULL, media_type TEXT NOT NULL,
  scope_digest TEXT NOT NULL, as_of_commit_seq INTEGER NOT NULL,
  row_cursor TEXT, next_row_cursor TEXT, row_count INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL,
  PRIMARY KEY(segment_id, context)
);
CREATE INDEX IF NOT EXISTS sync_segment_publications_by_key ON sync_segment_publications(partition, tbl, scope_digest, as_of_commit_seq);
CREATE INDEX IF NOT EXISTS sync_segment_publications_by_expiry ON sync_segment_publications(expires_at_ms);
-- Blob bytes are stored in chunks, so that neither an upload nor a
-- download holds a whole blob in memory: an upload writes its chunks under
-- a fresh upload_id, and becomes the blob only when its sync_blob_objects
-- row is written after the whole body was verified. Chunks of an upload
-- that never completed are swept after a grace period.
CREATE TABLE IF NOT EXISTS sync_blob_objects(
  partition TEXT NOT NULL, blob_id TEXT NOT NULL,
  byte_length INTEGER NOT NULL, media_type TEXT,
  created_at_ms INTEGER NOT NULL, upload_id TEXT NOT NULL,
  PRIMARY KEY(partition, blob_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS sync_blob_objects_by_upload ON sync_blob_objects(upload_id);
CREATE INDEX IF NOT EXISTS sync_blob_objects_by_age ON sync_blob_objects(created_at_ms);
CREATE TABLE IF NOT EXISTS sync_blob_chunks(
  upload_id TEXT NOT NULL, idx INTEGER NOT NULL,
  started_at_ms INTEGER NOT NULL, bytes BLOB NOT NULL,
  PRIMARY KEY(upload_id, idx)
);
CREATE INDEX IF NOT EXISTS sync_blob_chunks_by_age ON sync_blob_chunks(started_at_ms);
