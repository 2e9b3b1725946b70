-- Auth leases (§7.3), as the reference's lease store lays them out: the
-- lease of each (partition, clientId), and the revoked lease ids, kept
-- apart so that a revoked id never comes back.

CREATE TABLE IF NOT EXISTS sync_leases(
  partition TEXT NOT NULL, client_id TEXT NOT NULL,
  lease_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  allowed_scopes TEXT NOT NULL,
  issued_at_ms BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL,
  revoked INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(partition, client_id)
);

CREATE TABLE IF NOT EXISTS sync_lease_revocations(
  partition TEXT NOT NULL, lease_id TEXT NOT NULL,
  PRIMARY KEY(partition, lease_id)
);
