-- Core tables of the sync server, compatible with the reference server's
-- SQLite storage (0.24). Every open plans against them (core.go): what is
-- missing is created, missing columns of existing tables are added first
-- (coreColumns says which can be), nothing runs when all is there. One
-- CREATE statement per object; a trigger ends with a line "END;".
CREATE TABLE IF NOT EXISTS sync_partitions(
  partition TEXT PRIMARY KEY,
  max_commit_seq INTEGER NOT NULL DEFAULT 0,
  horizon_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sync_partition_registry(
  partition TEXT PRIMARY KEY,
  log_epoch TEXT NOT NULL,
  epoch_required INTEGER NOT NULL DEFAULT 0,
  last_authenticated_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sync_row_scopes(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, row_id TEXT NOT NULL,
  PRIMARY KEY(partition, tbl, var, value, row_id)
);
CREATE INDEX IF NOT EXISTS sync_row_scopes_by_row
  ON sync_row_scopes(partition, tbl, row_id);
CREATE TABLE IF NOT EXISTS sync_commits(
  partition TEXT NOT NULL, commit_seq INTEGER NOT NULL,
  client_id TEXT NOT NULL, client_commit_id TEXT NOT NULL,
  actor_id TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
  writer_version INTEGER,
  PRIMARY KEY(partition, commit_seq)
);
CREATE INDEX IF NOT EXISTS sync_commits_by_time
  ON sync_commits(partition, created_at_ms);
CREATE TABLE IF NOT EXISTS sync_changes(
  partition TEXT NOT NULL, commit_seq INTEGER NOT NULL, idx INTEGER NOT NULL,
  tbl TEXT NOT NULL, row_id TEXT NOT NULL, op INTEGER NOT NULL,
  row_version INTEGER, scopes TEXT NOT NULL, payload BLOB,
  PRIMARY KEY(partition, commit_seq, idx)
);
CREATE INDEX IF NOT EXISTS sync_changes_by_table
  ON sync_changes(partition, commit_seq, tbl, idx);
CREATE TABLE IF NOT EXISTS sync_change_scopes(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, commit_seq INTEGER NOT NULL,
  PRIMARY KEY(partition, tbl, var, value, commit_seq)
);
CREATE TABLE IF NOT EXISTS sync_push_results(
  partition TEXT NOT NULL, client_id TEXT NOT NULL,
  client_commit_id TEXT NOT NULL, result TEXT NOT NULL,
  PRIMARY KEY(partition, client_id, client_commit_id)
);
CREATE TABLE IF NOT EXISTS sync_clients(
  partition TEXT NOT NULL, client_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  wire_version INTEGER NOT NULL DEFAULT 1, cursor INTEGER,
  subscriptions TEXT, updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY(partition, client_id)
);
CREATE TABLE IF NOT EXISTS sync_tombstones(
  partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  commit_seq INTEGER NOT NULL,
  PRIMARY KEY(partition, tbl, row_id)
);
CREATE TABLE IF NOT EXISTS sync_backfill_checkpoints(
  partition TEXT NOT NULL, name TEXT NOT NULL,
  schema_version INTEGER NOT NULL,
  state TEXT NOT NULL CHECK(state IN ('declared','backfilling','activated')),
  watermark INTEGER NOT NULL DEFAULT 0,
  owner_epoch INTEGER NOT NULL DEFAULT 0,
  observed_rows INTEGER NOT NULL DEFAULT 0,
  updated_at_ms INTEGER NOT NULL,
  PRIMARY KEY(partition, name)
);
CREATE TABLE IF NOT EXISTS sync_writer_fence(
  partition TEXT PRIMARY KEY,
  required_writer_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sync_leases(
  partition TEXT NOT NULL, client_id TEXT NOT NULL,
  lease_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  allowed_scopes TEXT NOT NULL,
  issued_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL,
  revoked INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(partition, client_id)
);
CREATE TABLE IF NOT EXISTS sync_lease_revocations(
  partition TEXT NOT NULL, lease_id TEXT NOT NULL,
  PRIMARY KEY(partition, lease_id)
);
CREATE TRIGGER IF NOT EXISTS sync_commits_writer_fence
BEFORE INSERT ON sync_commits
WHEN EXISTS (
  SELECT 1 FROM sync_writer_fence
   WHERE partition = NEW.partition
     AND (NEW.writer_version IS NULL
          OR NEW.writer_version < required_writer_version)
)
BEGIN
  SELECT RAISE(ABORT, 'sync.storage.writer_fence_rejected');
END;
