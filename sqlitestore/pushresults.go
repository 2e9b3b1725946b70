package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncgo/syncgo/store"
)

const (
	selectPushResultsFirst = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
ORDER BY partition, client_id, client_commit_id LIMIT ?`
	selectPushResultsAfter = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
WHERE (partition, client_id, client_commit_id) > (?,?,?)
ORDER BY partition, client_id, client_commit_id LIMIT ?`
	deletePushResult = `DELETE FROM sync_push_results WHERE partition=? AND client_id=? AND client_commit_id=? AND result=?`

	// The stored position (store.PushResultsPositionName): one row of
	// sync_backfill_checkpoints in partition ''.
	pushResultsPositionWhere = `partition='' AND (name='` + store.PushResultsPositionName + `' OR substr(name, 1, 26)='` +
		store.PushResultsPositionName + `:')`
	selectPushResultsPosition = `SELECT name, watermark, observed_rows, updated_at_ms FROM sync_backfill_checkpoints
WHERE ` + pushResultsPositionWhere + ` ORDER BY updated_at_ms DESC LIMIT 1`
	clearPushResultsPosition = `DELETE FROM sync_backfill_checkpoints WHERE ` + pushResultsPositionWhere
	putPushResultsPosition   = `INSERT INTO sync_backfill_checkpoints(partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms)
VALUES ('', ?, 0, 'activated', ?, 0, ?, ?)`
)

// PrunePushResults implements store.PushResultPruner. The batch is read
// and its records decoded on a reader connection, off the single writer;
// one writer job then deletes the old rows by primary key, each only if
// its record is still the one read (a record is never updated, but a
// deleted one may be recorded again by a retry meanwhile), so the writer
// spends a few microseconds per deleted row and none per row examined.
func (s *Store) PrunePushResults(ctx context.Context, after *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	return s.prunePushResults(ctx, after, false, beforeMs, limit)
}

// ResumePushResultsPrune implements store.PushResultPruner: as
// PrunePushResults, reading the stored position in the batch's read
// transaction and writing the new one in the batch's writer job (so a
// batch that deletes nothing costs the writer one short job too).
func (s *Store) ResumePushResultsPrune(ctx context.Context, fallback *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	return s.prunePushResults(ctx, fallback, true, beforeMs, limit)
}

func (s *Store) prunePushResults(ctx context.Context, after *store.PushResultKey, resume bool, beforeMs int64, limit int) (store.PushResultPrune, error) {
	var out store.PushResultPrune
	if limit <= 0 {
		return out, fmt.Errorf("prune push results: limit %d is not positive", limit)
	}
	if s.w == nil {
		return out, ErrReadOnly
	}
	type oldRecord struct {
		key    store.PushResultKey
		result string
	}
	var (
		old    []oldRecord
		stored store.PushResultsPosition
	)
	err := s.readTx(ctx, func(c *conn) error {
		out, old = store.PushResultPrune{From: after}, old[:0]
		if resume {
			var err error
			if stored, err = scanPushResultsPosition(c.queryRow(selectPushResultsPosition)); err != nil {
				return err
			}
			if stored.Stored {
				out.From = stored.After
			}
		}
		var (
			rs  *rows
			err error
		)
		if from := out.From; from == nil {
			rs, err = c.query(selectPushResultsFirst, limit)
		} else {
			rs, err = c.query(selectPushResultsAfter, from.Partition, from.ClientID, from.ClientCommitID, limit)
		}
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var (
				k  store.PushResultKey
				js string
			)
			if err := rs.Scan(&k.Partition, &k.ClientID, &k.ClientCommitID, &js); err != nil {
				return err
			}
			out.Examined++
			out.Last = k
			if at, ok := store.PushRecordedAt([]byte(js)); ok && at < beforeMs {
				old = append(old, oldRecord{k, js})
			}
		}
		return rs.Err()
	})
	if err != nil {
		return store.PushResultPrune{}, fmt.Errorf("prune push results: %w", err)
	}
	out.Done = out.Examined < int64(limit)
	if len(old) == 0 && !resume {
		return out, nil
	}
	err = s.w.do(ctx, func(ctx context.Context, c *conn) error {
		out.Deleted = 0
		for _, r := range old {
			n, err := c.execChanges(deletePushResult, r.key.Partition, r.key.ClientID, r.key.ClientCommitID, r.result)
			if err != nil {
				return err
			}
			out.Deleted += n
		}
		if !resume {
			return nil
		}
		if err := c.exec(clearPushResultsPosition); err != nil {
			return err
		}
		next := store.NextPushResultsPosition(stored, out, time.Now().UnixMilli())
		return c.exec(putPushResultsPosition, store.EncodePushResultsPosition(next.After), next.Laps, next.Examined, next.UpdatedAtMs)
	})
	if err != nil {
		return store.PushResultPrune{}, fmt.Errorf("prune push results: %w", err)
	}
	return out, nil
}

// PushResultsPosition implements store.PushResultPruner.
func (s *Store) PushResultsPosition(ctx context.Context) (store.PushResultsPosition, error) {
	var p store.PushResultsPosition
	err := s.read(ctx, func(c *conn) error {
		var err error
		p, err = scanPushResultsPosition(c.queryRow(selectPushResultsPosition))
		if isNoSuchTable(err) {
			// A read-only store on a database no read-write open has
			// migrated: no position.
			return nil
		}
		return err
	})
	if err != nil {
		return store.PushResultsPosition{}, fmt.Errorf("read the push-result prune position: %w", err)
	}
	return p, nil
}

// scanPushResultsPosition reads the stored position's row; no row, or a
// name that is not a position's, is no position.
func scanPushResultsPosition(r *row) (store.PushResultsPosition, error) {
	return store.ScanPushResultsPosition(r.Scan, func(err error) bool { return errors.Is(err, errNoRows) })
}

var _ store.PushResultPruner = (*Store)(nil)
