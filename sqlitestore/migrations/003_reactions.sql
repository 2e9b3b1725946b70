-- Durable reactions (§6.9), in the reference's layout: the reactions each
-- commit planned, with their delivery state (pending, leased, completed,
-- dead-letter), lease and last failure. The indexes lead with the status,
-- since a runner claims and settles across partitions: due pending rows,
-- expired leases, and terminal rows for retention.
CREATE TABLE IF NOT EXISTS sync_reactions(
  partition TEXT NOT NULL, idempotency_key TEXT NOT NULL,
  type TEXT NOT NULL, version INTEGER NOT NULL, payload TEXT NOT NULL,
  source_client_id TEXT NOT NULL, source_client_commit_id TEXT NOT NULL,
  source_commit_seq INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
  available_at_ms INTEGER NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
  lease_owner TEXT, lease_expires_at_ms INTEGER, completed_at_ms INTEGER,
  last_failure TEXT,
  PRIMARY KEY(partition, idempotency_key),
  CHECK(status IN ('pending', 'leased', 'completed', 'dead-letter'))
);
CREATE INDEX IF NOT EXISTS sync_reactions_claim
  ON sync_reactions(status, available_at_ms);
CREATE INDEX IF NOT EXISTS sync_reactions_expiry
  ON sync_reactions(status, lease_expires_at_ms);
CREATE INDEX IF NOT EXISTS sync_reactions_terminal
  ON sync_reactions(status, completed_at_ms);
