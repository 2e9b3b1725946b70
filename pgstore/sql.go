package pgstore

// SQL of the core sync_* tables, grouped by use. The SQL of the app tables
// is generated per table (tables.go); the DDL of the core tables is in
// migrations/*.sql.

// Open.
const (
	// sqlMigrationLock serializes the driver's migrations of one database
	// schema (the core tables, schema bumps, Upgrade; see lock.go): CREATE
	// statements are not safe against each other.
	sqlMigrationLock = `SELECT pg_advisory_xact_lock(hashtextextended('syncgo.migrate:' || current_schema(), 0))`

	// sqlCurrentSchema names the schema the tables were created in.
	sqlCurrentSchema = `SELECT current_schema()`
)

// Write boundary and commit log.
const (
	// sqlLockPartition inserts the partition's counter row if absent and
	// takes its row lock in one statement.
	sqlLockPartition = `INSERT INTO sync_partitions(partition) VALUES ($1)
ON CONFLICT (partition) DO UPDATE SET partition = EXCLUDED.partition
RETURNING max_commit_seq, horizon_seq`

	// sqlSetMaxCommitSeq writes the newest sequence back to the locked
	// row, once per transaction, before COMMIT: the appends of the
	// transaction take their sequences from the one the lock read.
	sqlSetMaxCommitSeq = `UPDATE sync_partitions SET max_commit_seq = $2 WHERE partition = $1`

	// sqlAppendCommit is an append in one statement: the commit row ($2
	// its sequence; the fence trigger runs here), its changes ($8-$14),
	// their scope index entries ($15-$17), the delete tombstones ($18,
	// $19). Its parts write distinct tables and distinct keys (the arrays
	// are deduplicated), so one snapshot serves them. The notification is
	// the batch's (sqlNotifyCommit).
	sqlAppendCommit = sqlAppendWith + "\nSELECT 1"

	// sqlAppendCommitResult is sqlAppendCommit that also records the
	// commit's push result ($20, $21 its commit, $22 the record): a
	// PutPushResult right after the append joins its statement.
	sqlAppendCommitResult = sqlAppendWith + `, j AS (
  INSERT INTO sync_push_results(partition, client_id, client_commit_id, result) VALUES ($1, $20, $21, $22)
)
SELECT 1`

	sqlAppendWith = `WITH c AS (
  INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
), ch AS (
  INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
  SELECT $1, $2, c.idx, c.tbl, c.row_id, c.op, c.row_version, c.scopes::jsonb, c.payload
    FROM unnest($8::int4[], $9::text[], $10::text[], $11::int2[], $12::int8[], $13::text[], $14::bytea[])
         AS c(idx, tbl, row_id, op, row_version, scopes, payload)
), cs AS (
  INSERT INTO sync_change_scopes(partition, tbl, var, value, commit_seq)
  SELECT $1, s.tbl, s.var, s.value, $2 FROM unnest($15::text[], $16::text[], $17::text[]) AS s(tbl, var, value)
  ON CONFLICT DO NOTHING
), tb AS (
  INSERT INTO sync_tombstones(partition, tbl, row_id, commit_seq)
  SELECT $1, t.tbl, t.row_id, $2 FROM unnest($18::text[], $19::text[]) AS t(tbl, row_id)
  ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq
)`

	// sqlInsertCommit writes the commit row ($2 its sequence); the fence
	// trigger runs here.
	sqlInsertCommit = `INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

	sqlInsertChanges = `INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
SELECT $1, $2, c.idx, c.tbl, c.row_id, c.op, c.row_version, c.scopes::jsonb, c.payload
  FROM unnest($3::int4[], $4::text[], $5::text[], $6::int2[], $7::int8[], $8::text[], $9::bytea[])
       AS c(idx, tbl, row_id, op, row_version, scopes, payload)`

	sqlInsertChangeScopes = `INSERT INTO sync_change_scopes(partition, tbl, var, value, commit_seq)
SELECT $1, s.tbl, s.var, s.value, $2
  FROM unnest($3::text[], $4::text[], $5::text[]) AS s(tbl, var, value)
ON CONFLICT DO NOTHING`

	sqlUpsertTombstones = `INSERT INTO sync_tombstones(partition, tbl, row_id, commit_seq)
SELECT $1, t.tbl, t.row_id, $2
  FROM unnest($3::text[], $4::text[]) AS t(tbl, row_id)
ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq`

	// sqlNotifyCommit announces the sequence $3 on the commit channel. A
	// batch sends it once, with its newest sequence, right after its
	// COMMIT in the same pipelined round trip, as a transaction of its own
	// (one that writes nothing, so it flushes no WAL): a transaction that
	// notifies holds Postgres's database-wide notify lock from its commit
	// until that commit is durable, which inside the batch would
	// serialize the commits of every partition. It notifies only if the
	// sequence is committed (a COMMIT that rolled back notifies nothing).
	// Receivers read the range up to the sequence (internal/realtime), so
	// one notification covers the batch. $1 is the partition, $2 the
	// store's schema; the payload is "<seq>:<schema>:<partition>", or
	// "<seq>:<schema>" when that would reach the 8000-byte payload limit
	// (see listen.go).
	sqlNotifyCommit = `SELECT pg_notify('` + notifyChannel + `',
  CASE WHEN octet_length(n.msg) < ` + notifyPayloadLimit + ` THEN n.msg ELSE n.seq || ':' || $2::text END)
  FROM (SELECT $3::bigint::text AS seq, $3::bigint::text || ':' || $2::text || ':' || $1::text AS msg) n
 WHERE EXISTS (SELECT 1 FROM sync_partitions WHERE partition = $1 AND max_commit_seq >= $3)`

	// sqlTombstones reads the tombstones of a list of rows ($2, $3): a
	// primary-key probe per row.
	sqlTombstones = `SELECT k.tbl, k.row_id, t.commit_seq
  FROM unnest($2::text[], $3::text[]) AS k(tbl, row_id)
  CROSS JOIN LATERAL (SELECT commit_seq FROM sync_tombstones WHERE partition = $1 AND tbl = k.tbl AND row_id = k.row_id LIMIT 1) t`

	sqlTombstone      = `SELECT commit_seq FROM sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3`
	sqlClearTombstone = `DELETE FROM sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3`
)

// Push-result journal.
const (
	sqlPushResult    = `SELECT result FROM sync_push_results WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3`
	sqlPutPushResult = `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING 1`
	// sqlPushResults reads the results of a list of commits ($2, $3): a
	// primary-key probe per commit, whatever the table's statistics (LIMIT
	// 1 keeps the subquery from being flattened into a join that the
	// planner may drive by partition alone).
	sqlPushResults = `SELECT k.client_id, k.client_commit_id, j.result
  FROM unnest($2::text[], $3::text[]) AS k(client_id, client_commit_id)
  CROSS JOIN LATERAL (SELECT result FROM sync_push_results
                       WHERE partition = $1 AND client_id = k.client_id AND client_commit_id = k.client_commit_id LIMIT 1) j`
	// sqlInsertPushResult records a result known to be new.
	sqlInsertPushResult = `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result) VALUES ($1, $2, $3, $4)`
)

// Commit window: candidate commits from the change scope index on the
// first key, one ordered, limited index range per value (an index scan
// with value = ANY cannot return commit_seq in order before Postgres 17),
// joined to the commit rows (a primary-key probe per candidate: LIMIT 1
// keeps the planner from choosing otherwise on a table without
// statistics yet) and the table's changes (an index probe per candidate:
// OFFSET 0 keeps the subquery from being flattened, since on a table
// without statistics the planner otherwise scanned the partition's changes
// of the table for every candidate: 444 ms for a window of 512 commits in
// a log of 1,000, 8 ms with the probe).
const sqlCommitWindow = `SELECT c.commit_seq, m.created_at_ms, m.actor_id, m.client_id, m.client_commit_id,
       ch.row_id, ch.op, ch.row_version, ch.scopes, ch.payload
  FROM (` + sqlWindowCandidates + `) c
  LEFT JOIN LATERAL (
    SELECT created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
     WHERE partition = $1 AND commit_seq = c.commit_seq
     LIMIT 1) m ON TRUE
  LEFT JOIN LATERAL (
    SELECT row_id, op, row_version, scopes, payload, idx FROM sync_changes
     WHERE partition = $1 AND commit_seq = c.commit_seq AND tbl = $2
    OFFSET 0) ch ON TRUE
 ORDER BY c.commit_seq, ch.idx`

// sqlWindowCandidates is the candidate part of sqlCommitWindow alone: the
// page's candidate sequences, in order (an index-only walk per value).
const sqlWindowCandidates = `SELECT DISTINCT x.commit_seq
  FROM unnest($4::text[]) AS v(value)
  CROSS JOIN LATERAL (
    SELECT cs.commit_seq FROM sync_change_scopes cs
     WHERE cs.partition = $1 AND cs.tbl = $2 AND cs.var = $3 AND cs.value = v.value
       AND cs.commit_seq > $5 AND cs.commit_seq <= $6
     ORDER BY cs.commit_seq
     LIMIT $7) x
 ORDER BY x.commit_seq
 LIMIT $7`

// sqlRangeCommits and sqlRangeChanges read every commit of a range of
// the log and their changes of the table, each by one primary-key range
// scan in order, sent together (one round trip) and merged in Go. Two
// single-table scans and not a join: on tables without statistics yet
// (a fresh database) the planner joined the two ranges by a nested loop
// that rescanned one range per row of the other (0.6 s for 1,000
// commits). sqlRangeChanges has sqlCommitWindow's columns, the commit's
// own left NULL (they come from sqlRangeCommits), and its scopes NULL
// when they equal $5 (windowReader.same: the scopes every change of a
// one-value-per-key window stores), which the reader knows decoded:
// comparing two JSONB values costs the backend less than printing one,
// and a catch-up's changes mostly store the same scopes. Scopes stored in
// the reference's JSONB string form (COMPAT.md) never equal $5 and come
// whole.
const sqlRangeCommits = `SELECT commit_seq, created_at_ms, actor_id, client_id, client_commit_id
  FROM sync_commits
 WHERE partition = $1 AND commit_seq >= $2 AND commit_seq <= $3
 ORDER BY commit_seq`

// sqlRangeCommitsWire is sqlRangeCommits for a WireOnly window: the
// client ids are not read (NULL, read as empty).
const sqlRangeCommitsWire = `SELECT commit_seq, created_at_ms, actor_id, NULL::text, NULL::text
  FROM sync_commits
 WHERE partition = $1 AND commit_seq >= $2 AND commit_seq <= $3
 ORDER BY commit_seq`

const sqlRangeChanges = `SELECT commit_seq, NULL::bigint, NULL::text, NULL::text, NULL::text,
       row_id, op, row_version, CASE WHEN scopes = $5::jsonb THEN NULL ELSE scopes END, payload
  FROM sync_changes
 WHERE partition = $1 AND commit_seq >= $3 AND commit_seq <= $4 AND tbl = $2
 ORDER BY commit_seq, idx`

// sqlLatestScopedChangeSeq is the newest sequence in the change scope
// index for any of the values: one backward index probe per value.
const sqlLatestScopedChangeSeq = `SELECT coalesce(max(x.seq), 0)
  FROM unnest($4::text[]) AS v(value)
  CROSS JOIN LATERAL (
    SELECT max(cs.commit_seq) AS seq FROM sync_change_scopes cs
     WHERE cs.partition = $1 AND cs.tbl = $2 AND cs.var = $3 AND cs.value = v.value) x`

// Partitions.
const (
	sqlTouchPartition = `WITH reg AS (
  INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
  VALUES ($1, $2, FALSE, $3)
  ON CONFLICT (partition) DO UPDATE SET last_authenticated_at_ms = EXCLUDED.last_authenticated_at_ms
  RETURNING log_epoch, epoch_required, last_authenticated_at_ms
)
SELECT reg.log_epoch, reg.epoch_required, reg.last_authenticated_at_ms,
       coalesce(p.max_commit_seq, 0), coalesce(p.horizon_seq, 0)
  FROM reg LEFT JOIN sync_partitions p ON p.partition = $1`

	sqlPartition = `SELECT r.partition IS NOT NULL, coalesce(r.log_epoch, ''), coalesce(r.epoch_required, FALSE),
       coalesce(r.last_authenticated_at_ms, 0),
       p.partition IS NOT NULL, coalesce(p.max_commit_seq, 0), coalesce(p.horizon_seq, 0)
  FROM (SELECT $1::text AS id) k
  LEFT JOIN sync_partition_registry r ON r.partition = k.id
  LEFT JOIN sync_partitions p ON p.partition = k.id`

	sqlCommitHeads = `SELECT partition, max_commit_seq FROM sync_partitions WHERE partition = ANY($1::text[])`

	sqlRotateEpoch = `INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
VALUES ($1, $2, TRUE, $3)
ON CONFLICT (partition) DO UPDATE SET log_epoch = EXCLUDED.log_epoch, epoch_required = TRUE,
  last_authenticated_at_ms = EXCLUDED.last_authenticated_at_ms`

	sqlDeleteClients = `DELETE FROM sync_clients WHERE partition = $1`

	// sqlRotateEpochs is sqlRotateEpoch for the partitions $1, each to its
	// epoch in $2.
	sqlRotateEpochs = `INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
SELECT p, e, TRUE, $3 FROM unnest($1::text[], $2::text[]) AS r(p, e)
ON CONFLICT (partition) DO UPDATE SET log_epoch = EXCLUDED.log_epoch, epoch_required = TRUE,
  last_authenticated_at_ms = EXCLUDED.last_authenticated_at_ms`

	sqlDeleteClientsOf = `DELETE FROM sync_clients WHERE partition = ANY($1::text[])`

	// sqlRegistryEpochShared reads the epoch and keeps a rotation from
	// committing until the prune does.
	sqlRegistryEpochShared = `SELECT log_epoch FROM sync_partition_registry WHERE partition = $1 FOR SHARE`

	sqlPruneCommits      = `DELETE FROM sync_commits WHERE partition = $1 AND commit_seq <= $2`
	sqlPruneChanges      = `DELETE FROM sync_changes WHERE partition = $1 AND commit_seq <= $2`
	sqlPruneChangeScopes = `DELETE FROM sync_change_scopes WHERE partition = $1 AND commit_seq <= $2`
	sqlPruneTombstones   = `DELETE FROM sync_tombstones WHERE partition = $1 AND commit_seq <= $2`
	sqlSetHorizon        = `UPDATE sync_partitions SET horizon_seq = GREATEST(horizon_seq, $2) WHERE partition = $1 RETURNING horizon_seq`

	sqlCommitSeqBefore = `SELECT coalesce(max(commit_seq), 0) FROM sync_commits WHERE partition = $1 AND created_at_ms < $2`
)

// Clients.
const (
	sqlClient = `SELECT actor_id, wire_version, cursor, subscriptions, updated_at_ms
  FROM sync_clients WHERE partition = $1 AND client_id = $2`

	sqlPutClient = `INSERT INTO sync_clients(partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition, client_id) DO UPDATE SET
  wire_version = EXCLUDED.wire_version, cursor = EXCLUDED.cursor,
  subscriptions = EXCLUDED.subscriptions, updated_at_ms = EXCLUDED.updated_at_ms
  WHERE sync_clients.actor_id = EXCLUDED.actor_id`

	// sqlBindClient creates a client record if there is none; a
	// concurrent insert of the same key waits for the other transaction
	// and then does nothing. The stored record is read by a separate
	// statement (under READ COMMITTED a new snapshot, which sees the
	// winner's row).
	sqlBindClient = `INSERT INTO sync_clients(partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition, client_id) DO NOTHING`

	// sqlAdvanceCursor checks the epoch and moves the cursor in one
	// statement; an absent registry entry has the epoch "". $7, when not
	// null, is the subscription list read before (checkedSubscriptions):
	// the record must still store it.
	sqlAdvanceCursor = `WITH cur AS (
  SELECT coalesce((SELECT log_epoch FROM sync_partition_registry WHERE partition = $1), '') = $6 AS ok
), upd AS (
  UPDATE sync_clients SET cursor = GREATEST(cursor, $4), updated_at_ms = GREATEST(updated_at_ms, $5)
   WHERE partition = $1 AND client_id = $2 AND actor_id = $3 AND cursor < $4
     AND (SELECT ok FROM cur) AND ($7::text IS NULL OR subscriptions = $7::jsonb)
  RETURNING 1
)
SELECT (SELECT ok FROM cur), (SELECT count(*) FROM upd)`

	// sqlAdvanceCursors applies a batch of acks of partition $1
	// (AdvanceClientCursors) as sqlAdvanceCursor applies one: monotonic,
	// the record's own actor, the partition's current epoch only, the
	// subscription list read before when subs is not null; it returns the
	// positions (idx) of the acks that moved a cursor.
	sqlAdvanceCursors = `UPDATE sync_clients c SET cursor = a.cursor, updated_at_ms = GREATEST(c.updated_at_ms, a.at)
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::int[], $8::text[])
  AS a(client_id, actor_id, epoch, cursor, at, idx, subs)
WHERE c.partition = $1 AND c.client_id = a.client_id AND c.actor_id = a.actor_id AND c.cursor < a.cursor
  AND (a.subs IS NULL OR c.subscriptions = a.subs::jsonb)
  AND a.epoch = (SELECT log_epoch FROM sync_partition_registry WHERE partition = $1)
RETURNING a.idx`

	// sqlWriteDeferredClients moves the cursors of a batch of deferred
	// client records: only records still bound to the actor, at the wire
	// version and the cursor the request read, in a partition whose epoch
	// did not change; the update time only moves forward.
	sqlWriteDeferredClients = `UPDATE sync_clients c SET cursor = u.cursor, updated_at_ms = GREATEST(c.updated_at_ms, u.at)
FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[])
  AS u(partition, client_id, actor_id, wire_version, epoch, base, cursor, at)
WHERE c.partition = u.partition AND c.client_id = u.client_id AND c.actor_id = u.actor_id
  AND c.wire_version = u.wire_version AND c.cursor = u.base
  AND EXISTS (SELECT 1 FROM sync_partition_registry r WHERE r.partition = u.partition AND r.log_epoch = u.epoch)`

	sqlClientSubscriptions = `SELECT client_id, subscriptions::text FROM sync_clients
 WHERE partition = $1 AND client_id = ANY($2::text[])`

	sqlActiveCursorFloor = `SELECT min(cursor) FROM sync_clients WHERE partition = $1 AND updated_at_ms >= $2 AND cursor >= 0`
)

// Schema marker.
const (
	sqlMarker       = `SELECT schema_version, layouts FROM sync_schema_meta WHERE id = 1`
	sqlMarkerLocked = sqlMarker + ` FOR UPDATE`
	sqlPutMarker    = `INSERT INTO sync_schema_meta(id, schema_version, layouts) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET schema_version = EXCLUDED.schema_version, layouts = EXCLUDED.layouts`
)
