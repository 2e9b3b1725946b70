package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncgo/syncgo/store"
)

const (
	selectPushResultsFirst = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
ORDER BY partition, client_id, client_commit_id LIMIT ?`
	selectPushResultsAfter = `SELECT partition, client_id, client_commit_id, result FROM sync_push_results
WHERE (partition, client_id, client_commit_id) > (?,?,?)
ORDER BY partition, client_id, client_commit_id LIMIT ?`
	deletePushResult = `DELETE FROM sync_push_results WHERE partition=? AND client_id=? AND client_commit_id=? AND result=?`
)

// PrunePushResults implements store.PushResultPruner. The batch is read
// and its records decoded on a reader connection, off the single writer;
// one writer job then deletes the old rows by primary key, each only if
// its record is still the one read (a record is never updated, but a
// deleted one may be recorded again by a retry meanwhile), so the writer
// spends a few microseconds per deleted row and none per row examined.
func (s *Store) PrunePushResults(ctx context.Context, after *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
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
	var old []oldRecord
	err := s.read(ctx, func(c *conn) error {
		out, old = store.PushResultPrune{}, old[:0]
		var (
			rs  *rows
			err error
		)
		if after == nil {
			rs, err = c.query(selectPushResultsFirst, limit)
		} else {
			rs, err = c.query(selectPushResultsAfter, after.Partition, after.ClientID, after.ClientCommitID, limit)
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
	if len(old) == 0 {
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
		return nil
	})
	if err != nil {
		return store.PushResultPrune{}, fmt.Errorf("prune push results: %w", err)
	}
	return out, nil
}

var _ store.PushResultPruner = (*Store)(nil)
