package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/syncgo/syncgo/store"
)

// Durable reactions (store.ReactionStore, §6.9) in sync_reactions
// (migrations/003_reactions.sql). Every transition runs on the single
// writer, so a claim's settle-and-lease statements see no interleaving
// write and concurrent claims get disjoint rows; the owner comparisons
// make a stale runner's transitions no-ops.

var (
	_ store.ReactionTx    = (*writeTx)(nil)
	_ store.ReactionStore = (*Store)(nil)
)

const sqlEnqueueReaction = `INSERT INTO sync_reactions(partition, idempotency_key, type, version, payload,
  source_client_id, source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms,
  status, attempts, max_attempts)
VALUES (?,?,?,?,?,?,?,?,?,?,'pending',0,?)`

// EnqueueReactions implements store.ReactionTx: the rows join the write's
// savepoint, so they commit or roll back with the commit.
func (tx *writeTx) EnqueueReactions(ctx context.Context, rs []store.NewReaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, r := range rs {
		if err := tx.c.exec(sqlEnqueueReaction, tx.partition, r.IdempotencyKey, r.Type, r.Version, string(r.Payload),
			r.SourceClientID, r.SourceClientCommitID, r.SourceCommitSeq, r.CreatedAtMs, r.CreatedAtMs, r.MaxAttempts); err != nil {
			return fmt.Errorf("enqueue reaction: %w", err)
		}
	}
	return nil
}

// sqlSettleExpired returns expired leases to pending (due now), or to
// dead-letter when their attempt was the last.
const sqlSettleExpired = `UPDATE sync_reactions SET
  status = CASE WHEN attempts >= max_attempts THEN 'dead-letter' ELSE 'pending' END,
  available_at_ms = ?1,
  last_failure = CASE WHEN attempts >= max_attempts THEN ?2 ELSE last_failure END,
  lease_owner = NULL, lease_expires_at_ms = NULL
WHERE status = 'leased' AND lease_expires_at_ms <= ?1`

const reactionColumns = `partition, idempotency_key, type, version, payload, source_client_id, source_client_commit_id,
  source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts, lease_owner,
  lease_expires_at_ms, completed_at_ms, last_failure`

// sqlClaimReactions leases the oldest due pending rows of the types (a
// JSON array). The limit is written into the statement: a bound LIMIT
// makes SQLite prepare the statement again at every execution (its plan
// depends on the value), which costs more than the claim itself; one
// cached statement per limit (at most Workers of them) does not.
func sqlClaimReactions(limit int) string {
	return `UPDATE sync_reactions SET status = 'leased', attempts = attempts + 1,
  lease_owner = ?1, lease_expires_at_ms = ?2, completed_at_ms = NULL
WHERE rowid IN (SELECT rowid FROM sync_reactions
  WHERE status = 'pending' AND available_at_ms <= ?3 AND type IN (SELECT value FROM json_each(?4))
  ORDER BY available_at_ms LIMIT ` + strconv.Itoa(limit) + `)
RETURNING ` + reactionColumns
}

// ClaimReactions implements store.ReactionStore.
func (s *Store) ClaimReactions(ctx context.Context, c store.ReactionClaim) ([]store.Reaction, error) {
	if len(c.Types) == 0 || c.Limit <= 0 {
		return nil, nil
	}
	claim := sqlClaimReactions(min(c.Limit, store.MaxReactionPage))
	types, err := json.Marshal(c.Types)
	if err != nil {
		return nil, err
	}
	var out []store.Reaction
	err = s.w.do(ctx, func(_ context.Context, conn *conn) error {
		out = out[:0]
		if err := conn.exec(sqlSettleExpired, c.NowMs, string(store.ReactionExpiredFailure(c.NowMs))); err != nil {
			return err
		}
		rows, err := conn.query(claim, c.Owner, c.LeaseUntilMs, c.NowMs, string(types))
		if err != nil {
			return err
		}
		out, err = scanReactions(rows, out)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim reactions: %w", err)
	}
	return out, nil
}

func scanReactions(rows *rows, out []store.Reaction) ([]store.Reaction, error) {
	defer rows.Close()
	for rows.Next() {
		var (
			r                 store.Reaction
			payload, state    string
			owner, failure    nullString
			expires, complete nullInt64
		)
		if err := rows.Scan(&r.Partition, &r.IdempotencyKey, &r.Type, &r.Version, &payload, &r.SourceClientID,
			&r.SourceClientCommitID, &r.SourceCommitSeq, &r.CreatedAtMs, &r.AvailableAtMs, &state, &r.Attempts,
			&r.MaxAttempts, &owner, &expires, &complete, &failure); err != nil {
			return nil, err
		}
		r.Payload, r.State = []byte(payload), store.ReactionState(state)
		r.LeaseOwner, r.LeaseExpiresAtMs, r.CompletedAtMs = owner.String, expires.Int64, complete.Int64
		if failure.Valid {
			r.LastFailure = []byte(failure.String)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// transition runs one owner-compared (or state-compared) update on the
// writer and reports whether it changed a row.
func (s *Store) transition(ctx context.Context, what, sql string, args ...any) (bool, error) {
	var n int64
	err := s.w.do(ctx, func(_ context.Context, c *conn) error {
		var err error
		n, err = c.execChanges(sql, args...)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n == 1, nil
}

const leasedBy = ` WHERE partition = ? AND idempotency_key = ? AND status = 'leased' AND lease_owner = ?`

// ExtendReactionLease implements store.ReactionStore.
func (s *Store) ExtendReactionLease(ctx context.Context, partition, key, owner string, untilMs int64) (bool, error) {
	return s.transition(ctx, "extend reaction lease", `UPDATE sync_reactions SET lease_expires_at_ms = ?`+leasedBy,
		untilMs, partition, key, owner)
}

// CompleteReaction implements store.ReactionStore.
func (s *Store) CompleteReaction(ctx context.Context, partition, key, owner string, atMs int64) (bool, error) {
	return s.transition(ctx, "complete reaction", `UPDATE sync_reactions SET status = 'completed', completed_at_ms = ?,
  lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy, atMs, partition, key, owner)
}

// FailReaction implements store.ReactionStore.
func (s *Store) FailReaction(ctx context.Context, partition, key, owner string, f store.ReactionFailure) (bool, error) {
	state, at := store.ReactionPending, f.RetryAtMs
	if f.RetryAtMs == 0 {
		state, at = store.ReactionDead, f.AtMs
	}
	return s.transition(ctx, "fail reaction", `UPDATE sync_reactions SET status = ?, available_at_ms = ?, last_failure = ?,
  lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy,
		string(state), at, string(store.EncodeReactionFailure(f)), partition, key, owner)
}

// ReleaseReaction implements store.ReactionStore.
func (s *Store) ReleaseReaction(ctx context.Context, partition, key, owner string, nowMs int64) (bool, error) {
	return s.transition(ctx, "release reaction", `UPDATE sync_reactions SET status = 'pending', available_at_ms = ?,
  attempts = max(attempts - 1, 0), lease_owner = NULL, lease_expires_at_ms = NULL`+leasedBy, nowMs, partition, key, owner)
}

// ReleaseClaim implements store.ReactionStore; the claim's leases are
// found through sync_reactions_expiry (status, lease_expires_at_ms).
func (s *Store) ReleaseClaim(ctx context.Context, owner string, leaseUntilMs, nowMs int64) (int64, error) {
	var n int64
	err := s.w.do(ctx, func(_ context.Context, c *conn) error {
		var err error
		n, err = c.execChanges(`UPDATE sync_reactions SET status = 'pending', available_at_ms = ?,
  attempts = max(attempts - 1, 0), lease_owner = NULL, lease_expires_at_ms = NULL
WHERE status = 'leased' AND lease_expires_at_ms = ? AND lease_owner = ?`, nowMs, leaseUntilMs, owner)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release claim: %w", err)
	}
	return n, nil
}

// RetryReaction implements store.ReactionStore.
func (s *Store) RetryReaction(ctx context.Context, partition, key string, nowMs int64) (bool, error) {
	return s.transition(ctx, "retry reaction", `UPDATE sync_reactions SET status = 'pending', attempts = 0, available_at_ms = ?,
  last_failure = NULL, lease_owner = NULL, lease_expires_at_ms = NULL, completed_at_ms = NULL
WHERE partition = ? AND idempotency_key = ? AND status = 'dead-letter'`, nowMs, partition, key)
}

// DropReaction implements store.ReactionStore.
func (s *Store) DropReaction(ctx context.Context, partition, key string) (bool, error) {
	return s.transition(ctx, "drop reaction",
		`DELETE FROM sync_reactions WHERE partition = ? AND idempotency_key = ? AND status = 'dead-letter'`, partition, key)
}

// RenameReactions implements store.ReactionRenamer.
func (s *Store) RenameReactions(ctx context.Context, from, to string) (store.ReactionRename, error) {
	var r store.ReactionRename
	err := s.w.do(ctx, func(_ context.Context, c *conn) error {
		var err error
		if r.Pending, err = c.execChanges(`UPDATE sync_reactions SET type = ? WHERE status = 'pending' AND type = ?`, to, from); err != nil {
			return err
		}
		if r.Dead, err = c.execChanges(`UPDATE sync_reactions SET type = ? WHERE status = 'dead-letter' AND type = ?`, to, from); err != nil {
			return err
		}
		rows, err := c.query(`SELECT count(*) FROM sync_reactions WHERE status = 'leased' AND type = ?`, from)
		if err != nil {
			return err
		}
		defer rows.Close()
		if rows.Next() {
			err = rows.Scan(&r.Leased)
		}
		if err == nil {
			err = rows.Err()
		}
		return err
	})
	if err != nil {
		return store.ReactionRename{}, fmt.Errorf("rename reactions: %w", err)
	}
	return r, nil
}

// sqlReactionBacklog counts the reactions not completed, reading the
// status-led indexes.
const sqlReactionBacklog = `SELECT
  (SELECT count(*) FROM sync_reactions WHERE status = 'pending' OR (status = 'leased' AND lease_expires_at_ms <= ?1)),
  (SELECT count(*) FROM sync_reactions WHERE status = 'leased' AND lease_expires_at_ms > ?1),
  (SELECT count(*) FROM sync_reactions WHERE status = 'dead-letter'),
  (SELECT coalesce(min(created_at_ms), 0) FROM sync_reactions
    WHERE status = 'pending' OR (status = 'leased' AND lease_expires_at_ms <= ?1))`

// ReactionBacklog implements store.ReactionStore.
func (s *Store) ReactionBacklog(ctx context.Context, nowMs int64) (store.ReactionBacklog, error) {
	if s.closed.Load() {
		return store.ReactionBacklog{}, store.ErrClosed
	}
	var b store.ReactionBacklog
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow(sqlReactionBacklog, nowMs).Scan(&b.Pending, &b.Running, &b.Dead, &b.OldestPendingCreatedAtMs)
	})
	if err != nil {
		return store.ReactionBacklog{}, fmt.Errorf("reaction backlog: %w", err)
	}
	return b, nil
}

// ListReactions implements store.ReactionStore.
func (s *Store) ListReactions(ctx context.Context, q store.ReactionQuery) ([]store.Reaction, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	sql := `SELECT ` + reactionColumns + ` FROM sync_reactions
WHERE (?1 = '' OR partition = ?1) AND (?2 = '' OR status = ?2) AND (partition, idempotency_key) > (?3, ?4)
ORDER BY partition, idempotency_key LIMIT ?5`
	var out []store.Reaction
	err := s.read(ctx, func(c *conn) error {
		rows, err := c.query(sql, q.Partition, string(q.State), q.AfterPartition, q.AfterKey, store.ReactionPage(q))
		if err != nil {
			return err
		}
		out, err = scanReactions(rows, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list reactions: %w", err)
	}
	return out, nil
}

// PruneReactions implements store.ReactionStore.
func (s *Store) PruneReactions(ctx context.Context, completedBeforeMs, deadBeforeMs int64, limit int) (int, int, error) {
	if limit <= 0 {
		return 0, 0, nil
	}
	var completed, dead int64
	err := s.w.do(ctx, func(_ context.Context, c *conn) error {
		var err error
		completed, err = c.execChanges(`DELETE FROM sync_reactions WHERE rowid IN (SELECT rowid FROM sync_reactions
  WHERE status = 'completed' AND completed_at_ms < ? ORDER BY completed_at_ms LIMIT ?)`, completedBeforeMs, limit)
		if err != nil || int(completed) >= limit {
			return err
		}
		dead, err = c.execChanges(`DELETE FROM sync_reactions WHERE rowid IN (SELECT rowid FROM sync_reactions
  WHERE status = 'dead-letter' AND available_at_ms < ? ORDER BY available_at_ms LIMIT ?)`, deadBeforeMs, limit-int(completed))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("prune reactions: %w", err)
	}
	return int(completed), int(dead), nil
}
