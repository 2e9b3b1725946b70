package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

	// The stored position (store.PushResultsPositionName): one row of
	// sync_backfill_checkpoints in partition ''.
	sqlPushResultsPositionWhere = `partition = '' AND (name = '` + store.PushResultsPositionName + `' OR left(name, ` +
		pushResultsPositionPrefixLen + `) = '` + store.PushResultsPositionName + `:')`
	sqlPushResultsPosition = `SELECT name, watermark, observed_rows, updated_at_ms FROM sync_backfill_checkpoints
WHERE ` + sqlPushResultsPositionWhere + ` ORDER BY updated_at_ms DESC LIMIT 1`
	sqlClearPushResultsPosition = `DELETE FROM sync_backfill_checkpoints WHERE ` + sqlPushResultsPositionWhere
	sqlPutPushResultsPosition   = `INSERT INTO sync_backfill_checkpoints(partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms)
VALUES ('', $1, 0, 'activated', $2, 0, $3, $4)`
	pushResultsPositionPrefixLen = "26" // len(store.PushResultsPositionName + ":")
	// sqlPushResultsAsyncCommit: a resumed batch writes (its position)
	// even when it deletes nothing, and its commit need not wait for the
	// WAL flush: a crash that loses it loses a position and deletes that
	// the next lap redoes (a record that comes back only answers a retry
	// cached, which the pruned record's retry may also get).
	sqlPushResultsAsyncCommit = `SET LOCAL synchronous_commit = off`

	// maxStoredPositionBytes bounds the stored name: with partition ''
	// its index entry stays under the B-tree limit (about 2.7 KB). Only
	// a journal key within some 100 bytes of that limit itself (ids far
	// over the server's 512-byte identifiers) is longer; the position is
	// then cleared rather than stored.
	maxStoredPositionBytes = 2600
)

// PrunePushResults implements store.PushResultPruner: one transaction,
// under a transaction-scoped advisory lock that a concurrent pruner of
// another process does not wait for (it skips its batch), reads the batch
// by primary key and deletes its rows recorded before beforeMs. The
// recorded time is read in Go, from either stored form of the record
// (json.go), so a record that does not decode is kept instead of failing
// the batch.
func (s *Store) PrunePushResults(ctx context.Context, after *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	return s.prunePushResults(ctx, after, false, beforeMs, limit)
}

// ResumePushResultsPrune implements store.PushResultPruner: as
// PrunePushResults, and under the same lock it reads the stored position
// (pipelined with the lock, so no round trip of its own) and writes the
// new one pipelined with the batch's delete, in the batch's transaction:
// the processes of a fleet take turns on batches of one walk. Its commit
// does not wait for the WAL flush (sqlPushResultsAsyncCommit).
func (s *Store) ResumePushResultsPrune(ctx context.Context, fallback *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	return s.prunePushResults(ctx, fallback, true, beforeMs, limit)
}

func (s *Store) prunePushResults(ctx context.Context, after *store.PushResultKey, resume bool, beforeMs int64, limit int) (store.PushResultPrune, error) {
	var out store.PushResultPrune
	if err := s.checkWrite(); err != nil {
		return out, err
	}
	if limit <= 0 {
		return out, fmt.Errorf("prune push results: limit %d is not positive", limit)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = store.PushResultPrune{From: after}
		var (
			locked bool
			stored store.PushResultsPosition
		)
		if resume {
			b := &pgx.Batch{}
			b.Queue(sqlPushResultsAsyncCommit)
			b.Queue(sqlTryLockPushResultsPrune)
			b.Queue(sqlPushResultsPosition)
			br := tx.SendBatch(ctx, b)
			_, err := br.Exec()
			if err == nil {
				err = br.QueryRow().Scan(&locked)
			}
			if err == nil {
				stored, err = scanPushResultsPosition(br.QueryRow())
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if stored.Stored {
				out.From = stored.After
			}
		} else if err := tx.QueryRow(ctx, sqlTryLockPushResultsPrune).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			out = store.PushResultPrune{Skipped: true}
			return nil
		}
		var (
			rs  pgx.Rows
			err error
		)
		if from := out.From; from == nil {
			rs, err = tx.Query(ctx, sqlPushResultsFirst, limit)
		} else {
			rs, err = tx.Query(ctx, sqlPushResultsAfter, from.Partition, from.ClientID, from.ClientCommitID, limit)
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
		b := &pgx.Batch{}
		if len(parts) > 0 {
			b.Queue(sqlDeletePushResults, parts, clients, commits).Exec(func(tag pgconn.CommandTag) error {
				out.Deleted = tag.RowsAffected()
				return nil
			})
		}
		if resume {
			b.Queue(sqlClearPushResultsPosition)
			next := store.NextPushResultsPosition(stored, out, time.Now().UnixMilli())
			if name := store.EncodePushResultsPosition(next.After); len(name) <= maxStoredPositionBytes {
				b.Queue(sqlPutPushResultsPosition, name, next.Laps, next.Examined, next.UpdatedAtMs)
			}
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return store.PushResultPrune{}, fmt.Errorf("prune push results: %w", err)
	}
	return out, nil
}

// PushResultsPosition implements store.PushResultPruner.
func (s *Store) PushResultsPosition(ctx context.Context) (store.PushResultsPosition, error) {
	if err := s.check(); err != nil {
		return store.PushResultsPosition{}, err
	}
	p, err := scanPushResultsPosition(s.pool.QueryRow(ctx, sqlPushResultsPosition))
	if err != nil {
		return store.PushResultsPosition{}, fmt.Errorf("read the push-result prune position: %w", err)
	}
	return p, nil
}

// scanPushResultsPosition reads the stored position's row; no row, or a
// name that is not a position's, is no position.
func scanPushResultsPosition(r pgx.Row) (store.PushResultsPosition, error) {
	return store.ScanPushResultsPosition(r.Scan, func(err error) bool { return errors.Is(err, pgx.ErrNoRows) })
}

var _ store.PushResultPruner = (*Store)(nil)
