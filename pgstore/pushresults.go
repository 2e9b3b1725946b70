package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

const (
	// sqlTryLockPushResultsPrune makes one process at a time prune the
	// journal of a database schema; the others skip their batch.
	sqlTryLockPushResultsPrune = `SELECT pg_try_advisory_xact_lock(hashtextextended('syncgo.push_results_prune:' || current_schema(), 0))`
	sqlPushResultsFirst        = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
ORDER BY partition, client_id, client_commit_id LIMIT $1`
	sqlPushResultsAfter = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
WHERE (partition, client_id, client_commit_id) > ($1, $2, $3)
ORDER BY partition, client_id, client_commit_id LIMIT $4`
	sqlDeletePushResults = `DELETE FROM sync_push_results
WHERE (partition, client_id, client_commit_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))`
)

// PrunePushResults implements store.PushResultPruner: one transaction,
// under a transaction-scoped advisory lock that a concurrent pruner of
// another process does not wait for (it skips its batch), reads the batch
// by primary key and deletes its rows recorded before beforeMs. The
// recorded time is read in Go, from either stored form of the record
// (json.go), so a record that does not decode is kept instead of failing
// the batch.
func (s *Store) PrunePushResults(ctx context.Context, after *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	var out store.PushResultPrune
	if err := s.checkWrite(); err != nil {
		return out, err
	}
	if limit <= 0 {
		return out, fmt.Errorf("prune push results: limit %d is not positive", limit)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = store.PushResultPrune{}
		var locked bool
		if err := tx.QueryRow(ctx, sqlTryLockPushResultsPrune).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			out.Skipped = true
			return nil
		}
		var (
			rs  pgx.Rows
			err error
		)
		if after == nil {
			rs, err = tx.Query(ctx, sqlPushResultsFirst, limit)
		} else {
			rs, err = tx.Query(ctx, sqlPushResultsAfter, after.Partition, after.ClientID, after.ClientCommitID, limit)
		}
		if err != nil {
			return err
		}
		var parts, clients, commits []string
		for rs.Next() {
			var (
				k  store.PushResultKey
				js []byte
			)
			if err := rs.Scan(&k.Partition, &k.ClientID, &k.ClientCommitID, &js); err != nil {
				rs.Close()
				return err
			}
			out.Examined++
			out.Last = k
			if at, ok := store.PushRecordedAt(js); ok && at < beforeMs {
				parts, clients, commits = append(parts, k.Partition), append(clients, k.ClientID), append(commits, k.ClientCommitID)
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		out.Done = out.Examined < int64(limit)
		if len(parts) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, sqlDeletePushResults, parts, clients, commits)
		if err != nil {
			return err
		}
		out.Deleted = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return store.PushResultPrune{}, fmt.Errorf("prune push results: %w", err)
	}
	return out, nil
}

var _ store.PushResultPruner = (*Store)(nil)
