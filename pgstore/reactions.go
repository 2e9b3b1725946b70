package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/store"
)

// Durable reactions (store.ReactionStore, §6.9) in sync_reactions
// (migrations/005_reactions.sql). A claim locks the rows it takes with
// FOR UPDATE SKIP LOCKED, so concurrent runners of any process get
// disjoint rows without waiting on one another; every later transition
// is one statement that compares the lease owner.

var (
	_ store.ReactionTx    = (*writeTx)(nil)
	_ store.ReactionStore = (*Store)(nil)
)

// sqlEnqueueReactions inserts a commit's reactions from parallel arrays.
const sqlEnqueueReactions = `INSERT INTO sync_reactions(partition, idempotency_key, type, version, payload,
  source_client_id, source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms,
  status, attempts, max_attempts)
SELECT $1, k, t, v, p::jsonb, sc, sci, ss, c, c, 'pending', 0, m
  FROM unnest($2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::int[])
    AS r(k, t, v, p, sc, sci, ss, c, m)`

// EnqueueReactions implements store.ReactionTx: one statement on the
// write's own connection, inside its transaction (and savepoint).
func (t *writeTx) EnqueueReactions(ctx context.Context, rs []store.NewReaction) error {
	if len(rs) == 0 {
		return nil
	}
	n := len(rs)
	keys, types, payloads, clients, commits := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, maxAttempts := make([]int32, n), make([]int32, n)
	seqs, created := make([]int64, n), make([]int64, n)
	for i, r := range rs {
		keys[i], types[i], payloads[i] = r.IdempotencyKey, r.Type, string(r.Payload)
		clients[i], commits[i], seqs[i], created[i] = r.SourceClientID, r.SourceClientCommitID, r.SourceCommitSeq, r.CreatedAtMs
		versions[i], maxAttempts[i] = r.Version, int32(r.MaxAttempts)
	}
	br, err := t.send(ctx, func(b *pgx.Batch) {
		b.Queue(sqlEnqueueReactions, t.partition, keys, types, versions, payloads, clients, commits, seqs, created, maxAttempts)
	})
	if err != nil {
		return fmt.Errorf("enqueue reactions: %w", err)
	}
	_, err = br.Exec()
	if err = closeBatch(br, err); err != nil {
		return fmt.Errorf("enqueue reactions: %w", err)
	}
	return nil
}

// sqlSettleExpired returns expired leases to pending (due now), or to
// dead-letter when their attempt was the last. It skips rows another
// claim holds and takes a bounded number per claim.
const sqlSettleExpired = `WITH expired AS (
  SELECT partition, idempotency_key FROM sync_reactions
   WHERE status = 'leased' AND lease_expires_at_ms <= $1
   FOR UPDATE SKIP LOCKED LIMIT 1000)
UPDATE sync_reactions AS r SET
  status = CASE WHEN r.attempts >= r.max_attempts THEN 'dead-letter' ELSE 'pending' END,
  available_at_ms = $1,
  last_failure = CASE WHEN r.attempts >= r.max_attempts THEN $2::jsonb ELSE r.last_failure END,
  lease_owner = NULL, lease_expires_at_ms = NULL
  FROM expired
 WHERE r.partition = expired.partition AND r.idempotency_key = expired.idempotency_key`

const reactionColumns = `r.partition, r.idempotency_key, r.type, r.version, r.payload::text, r.source_client_id,
  r.source_client_commit_id, r.source_commit_seq, r.created_at_ms, r.available_at_ms, r.status, r.attempts,
  r.max_attempts, r.lease_owner, r.lease_expires_at_ms, r.completed_at_ms, r.last_failure::text`

// sqlClaimReactions leases the oldest due pending rows of the types.
const sqlClaimReactions = `WITH due AS (
  SELECT partition, idempotency_key FROM sync_reactions
   WHERE status = 'pending' AND available_at_ms <= $1 AND type = ANY($2::text[])
   ORDER BY available_at_ms
   FOR UPDATE SKIP LOCKED LIMIT $3)
UPDATE sync_reactions AS r SET status = 'leased', attempts = r.attempts + 1,
  lease_owner = $4, lease_expires_at_ms = $5, completed_at_ms = NULL
  FROM due
 WHERE r.partition = due.partition AND r.idempotency_key = due.idempotency_key
RETURNING ` + reactionColumns

// ClaimReactions implements store.ReactionStore: the settling and the
// claim travel in one round trip (the claim's statement sees what the
// settling committed).
func (s *Store) ClaimReactions(ctx context.Context, c store.ReactionClaim) ([]store.Reaction, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	if len(c.Types) == 0 || c.Limit <= 0 {
		return nil, nil
	}
	// The pipeline is one implicit transaction: run again only when it
	// certainly did not commit (retryWrite), so a claim is never lost.
	out, err := retryWrite(s, ctx, "ClaimReactions", func() ([]store.Reaction, error) {
		b := &pgx.Batch{}
		b.Queue(sqlSettleExpired, c.NowMs, string(store.ReactionExpiredFailure(c.NowMs)))
		b.Queue(sqlClaimReactions, c.NowMs, c.Types, c.Limit, c.Owner, c.LeaseUntilMs)
		br := s.pool.SendBatch(ctx, b)
		_, err := br.Exec()
		var out []store.Reaction
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				out, err = scanReactions(rows)
			}
		}
		return out, closeBatch(br, err)
	})
	if err != nil {
		return nil, fmt.Errorf("claim reactions: %w", storageFull(err))
	}
	return out, nil
}

func scanReactions(rows pgx.Rows) ([]store.Reaction, error) {
	defer rows.Close()
	var out []store.Reaction
	for rows.Next() {
		var (
			r                 store.Reaction
			payload, state    string
			owner, failure    *string
			expires, complete *int64
		)
		if err := rows.Scan(&r.Partition, &r.IdempotencyKey, &r.Type, &r.Version, &payload, &r.SourceClientID,
			&r.SourceClientCommitID, &r.SourceCommitSeq, &r.CreatedAtMs, &r.AvailableAtMs, &state, &r.Attempts,
			&r.MaxAttempts, &owner, &expires, &complete, &failure); err != nil {
			return nil, err
		}
		r.Payload, r.State = []byte(payload), store.ReactionState(state)
		if owner != nil {
			r.LeaseOwner = *owner
		}
		if expires != nil {
			r.LeaseExpiresAtMs = *expires
		}
		if complete != nil {
			r.CompletedAtMs = *complete
		}
		if failure != nil {
			r.LastFailure = []byte(*failure)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// transition runs one owner-compared (or state-compared) statement and
// reports whether it changed a row. It runs again on another connection
// when the connection was lost before it could commit (retryWrite): a
// handler's outcome is then recorded rather than left to its lease's
// expiry, which would run the handler again.
func (s *Store) transition(ctx context.Context, what, sql string, args ...any) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	tag, err := retryWrite(s, ctx, what, func() (pgconn.CommandTag, error) { return s.pool.Exec(ctx, sql, args...) })
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, storageFull(err))
	}
	return tag.RowsAffected() == 1, nil
}

const leasedBy = ` WHERE partition = $1 AND idempotency_key = $2 AND status = 'leased' AND lease_owner = $3`

// ExtendReactionLease implements store.ReactionStore.
func (s *Store) ExtendReactionLease(ctx context.Context, partition, key, owner string, untilMs int64) (bool, error) {
	return s.transition(ctx, "extend reaction lease", `UPDATE sync_reactions SET lease_expires_at_ms = $4`+leasedBy,
		partition, key, owner, untilMs)
}

// CompleteReaction implements store.ReactionStore.
func (s *Store) CompleteReaction(ctx context.Context, partition, key, owner string, atMs int64) (bool, error) {
	return s.transition(ctx, "complete reaction", `UPDATE sync_reactions SET status = 'completed', completed_at_ms = $4,
  lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy, partition, key, owner, atMs)
}

// FailReaction implements store.ReactionStore.
func (s *Store) FailReaction(ctx context.Context, partition, key, owner string, f store.ReactionFailure) (bool, error) {
	state, at := store.ReactionPending, f.RetryAtMs
	if f.RetryAtMs == 0 {
		state, at = store.ReactionDead, f.AtMs
	}
	return s.transition(ctx, "fail reaction", `UPDATE sync_reactions SET status = $4, available_at_ms = $5,
  last_failure = $6::jsonb, lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy,
		partition, key, owner, string(state), at, string(store.EncodeReactionFailure(f)))
}

// ReleaseReaction implements store.ReactionStore.
func (s *Store) ReleaseReaction(ctx context.Context, partition, key, owner string, nowMs int64) (bool, error) {
	return s.transition(ctx, "release reaction", `UPDATE sync_reactions SET status = 'pending', available_at_ms = $4,
  attempts = greatest(attempts - 1, 0), lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy, partition, key, owner, nowMs)
}

// ReleaseClaim implements store.ReactionStore; the claim's leases are
// found through sync_reactions_expiry (status, lease_expires_at_ms).
func (s *Store) ReleaseClaim(ctx context.Context, owner string, leaseUntilMs, nowMs int64) (int64, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	tag, err := retryWrite(s, ctx, "release claim", func() (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, `UPDATE sync_reactions SET status = 'pending', available_at_ms = $3,
  attempts = greatest(attempts - 1, 0), lease_owner = NULL, lease_expires_at_ms = NULL
WHERE status = 'leased' AND lease_expires_at_ms = $2 AND lease_owner = $1`, owner, leaseUntilMs, nowMs)
	})
	if err != nil {
		return 0, fmt.Errorf("release claim: %w", storageFull(err))
	}
	return tag.RowsAffected(), nil
}

// RetryReaction implements store.ReactionStore.
func (s *Store) RetryReaction(ctx context.Context, partition, key string, nowMs int64) (bool, error) {
	return s.transition(ctx, "retry reaction", `UPDATE sync_reactions SET status = 'pending', attempts = 0,
  available_at_ms = $3, last_failure = NULL, lease_owner = NULL, lease_expires_at_ms = NULL, completed_at_ms = NULL
WHERE partition = $1 AND idempotency_key = $2 AND status = 'dead-letter'`, partition, key, nowMs)
}

// DropReaction implements store.ReactionStore.
func (s *Store) DropReaction(ctx context.Context, partition, key string) (bool, error) {
	return s.transition(ctx, "drop reaction",
		`DELETE FROM sync_reactions WHERE partition = $1 AND idempotency_key = $2 AND status = 'dead-letter'`, partition, key)
}

// sqlRenameReactions moves the pending reactions and dead letters of $1
// to $2 and counts, by state, what it moved and the leased ones left.
const sqlRenameReactions = `WITH moved AS (
  UPDATE sync_reactions SET type = $2 WHERE type = $1 AND status IN ('pending', 'dead-letter') RETURNING status)
SELECT
  (SELECT count(*) FROM moved WHERE status = 'pending'),
  (SELECT count(*) FROM moved WHERE status = 'dead-letter'),
  (SELECT count(*) FROM sync_reactions WHERE type = $1 AND status = 'leased')`

// RenameReactions implements store.ReactionRenamer.
func (s *Store) RenameReactions(ctx context.Context, from, to string) (store.ReactionRename, error) {
	if err := s.checkWrite(); err != nil {
		return store.ReactionRename{}, err
	}
	var r store.ReactionRename
	if err := s.retryingWrite(ctx, "rename reactions", func() error {
		return s.pool.QueryRow(ctx, sqlRenameReactions, from, to).Scan(&r.Pending, &r.Dead, &r.Leased)
	}); err != nil {
		return store.ReactionRename{}, fmt.Errorf("rename reactions: %w", storageFull(err))
	}
	return r, nil
}

// sqlReactionBacklog counts the reactions not completed, reading the
// status-led indexes.
const sqlReactionBacklog = `SELECT
  (SELECT count(*) FROM sync_reactions WHERE status = 'pending' OR (status = 'leased' AND lease_expires_at_ms <= $1)),
  (SELECT count(*) FROM sync_reactions WHERE status = 'leased' AND lease_expires_at_ms > $1),
  (SELECT count(*) FROM sync_reactions WHERE status = 'dead-letter'),
  (SELECT coalesce(min(created_at_ms), 0) FROM sync_reactions
    WHERE status = 'pending' OR (status = 'leased' AND lease_expires_at_ms <= $1))`

// ReactionBacklog implements store.ReactionStore.
func (s *Store) ReactionBacklog(ctx context.Context, nowMs int64) (store.ReactionBacklog, error) {
	return retry(s, ctx, "ReactionBacklog", func() (store.ReactionBacklog, error) { return s.reactionBacklogOnce(ctx, nowMs) })
}

// reactionBacklogOnce is ReactionBacklog, once (see "Lost connections", retry.go).
func (s *Store) reactionBacklogOnce(ctx context.Context, nowMs int64) (store.ReactionBacklog, error) {
	if err := s.check(); err != nil {
		return store.ReactionBacklog{}, err
	}
	var b store.ReactionBacklog
	if err := s.pool.QueryRow(ctx, sqlReactionBacklog, nowMs).Scan(&b.Pending, &b.Running, &b.Dead,
		&b.OldestPendingCreatedAtMs); err != nil {
		return store.ReactionBacklog{}, fmt.Errorf("reaction backlog: %w", err)
	}
	return b, nil
}

// ListReactions implements store.ReactionStore. Keys compare bytewise, as
// on SQLite.
func (s *Store) ListReactions(ctx context.Context, q store.ReactionQuery) ([]store.Reaction, error) {
	return retry(s, ctx, "ListReactions", func() ([]store.Reaction, error) { return s.listReactionsOnce(ctx, q) })
}

// listReactionsOnce is ListReactions, once (see "Lost connections", retry.go).
func (s *Store) listReactionsOnce(ctx context.Context, q store.ReactionQuery) ([]store.Reaction, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+reactionColumns+` FROM sync_reactions r
WHERE ($1 = '' OR r.partition = $1) AND ($2 = '' OR r.status = $2)
  AND (r.partition COLLATE "C", r.idempotency_key COLLATE "C") > ($3 COLLATE "C", $4 COLLATE "C")
ORDER BY r.partition COLLATE "C", r.idempotency_key COLLATE "C" LIMIT $5`,
		q.Partition, string(q.State), q.AfterPartition, q.AfterKey, store.ReactionPage(q))
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	out, err := scanReactions(rows)
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	return out, nil
}

// PruneReactions implements store.ReactionStore.
func (s *Store) PruneReactions(ctx context.Context, completedBeforeMs, deadBeforeMs int64, limit int) (int, int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, 0, err
	}
	if limit <= 0 {
		return 0, 0, nil
	}
	prune := func(state, column string, before int64, limit int) (int, error) {
		tag, err := retryWrite(s, ctx, "prune reactions", func() (pgconn.CommandTag, error) {
			return s.pool.Exec(ctx, `DELETE FROM sync_reactions AS r USING (
  SELECT partition, idempotency_key FROM sync_reactions WHERE status = $1 AND `+column+` < $2
   ORDER BY `+column+` FOR UPDATE SKIP LOCKED LIMIT $3) AS old
WHERE r.partition = old.partition AND r.idempotency_key = old.idempotency_key`, state, before, limit)
		})
		return int(tag.RowsAffected()), err
	}
	completed, err := prune(string(store.ReactionCompleted), "completed_at_ms", completedBeforeMs, limit)
	if err != nil {
		return 0, 0, fmt.Errorf("prune reactions: %w", err)
	}
	if completed >= limit {
		return completed, 0, nil
	}
	dead, err := prune(string(store.ReactionDead), "available_at_ms", deadBeforeMs, limit-completed)
	if err != nil {
		return completed, 0, fmt.Errorf("prune reactions: %w", err)
	}
	return completed, dead, nil
}
