-- RFC 0007 state (reference 0.23): backfill checkpoints, the per-partition
-- writer fence, and the trigger that enforces the fence inside the
-- database, so that an old binary's INSERT is refused without any
-- cooperation from its code. sync_commits.writer_version (in
-- 001_core_tables.sql) is nullable on purpose: an old writer omits the
-- column, and the trigger refuses NULL; a default would hand old writers a
-- passing value.

CREATE TABLE IF NOT EXISTS sync_backfill_checkpoints(
  partition TEXT NOT NULL, name TEXT NOT NULL,
  schema_version INTEGER NOT NULL,
  state TEXT NOT NULL CHECK(state IN ('declared','backfilling','activated')),
  watermark BIGINT NOT NULL DEFAULT 0,
  owner_epoch BIGINT NOT NULL DEFAULT 0,
  observed_rows BIGINT NOT NULL DEFAULT 0,
  updated_at_ms BIGINT NOT NULL,
  PRIMARY KEY(partition, name)
);

CREATE TABLE IF NOT EXISTS sync_writer_fence(
  partition TEXT PRIMARY KEY,
  required_writer_version INTEGER NOT NULL
);

-- No fence row for the partition: EXISTS is false and the insert passes.
-- The body is the reference's; Open replaces a function whose body
-- differs (white space aside).
CREATE OR REPLACE FUNCTION syncular_writer_fence()
RETURNS trigger AS $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM sync_writer_fence
     WHERE partition = NEW.partition
       AND (NEW.writer_version IS NULL
            OR NEW.writer_version < required_writer_version)
  ) THEN
    RAISE EXCEPTION 'sync.storage.writer_fence_rejected';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;

-- Created only when missing (the reference drops and re-creates it; both
-- leave the same trigger behind).
CREATE TRIGGER sync_commits_writer_fence
BEFORE INSERT ON sync_commits
FOR EACH ROW EXECUTE FUNCTION syncular_writer_fence();
