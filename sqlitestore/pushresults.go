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
	deletePushResult = `DELETE FROM sync_push_results WHERE partition=? AND client_id=? AND client_commit_id=?`
)

// PrunePushResults implements store.PushResultPruner: one writer job reads
// the batch by primary key and deletes its rows recorded before beforeMs,
// so the batch is one short transaction of the writer (pushes queued
// meanwhile run in the writer's next batch).
func (s *Store) PrunePushResults(ctx context.Context, after *store.PushResultKey, beforeMs int64, limit int) (store.PushResultPrune, error) {
	var out store.PushResultPrune
	if limit <= 0 {
		return out, fmt.Errorf("prune push results: limit %d is not positive", limit)
	}
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		out = store.PushResultPrune{}
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
		var old []store.PushResultKey
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
				old = append(old, k)
			}
		}
		if err := rs.Err(); err != nil {
			rs.Close()
			return err
		}
		if err := rs.Close(); err != nil {
			return err
		}
		out.Done = out.Examined < int64(limit)
		for _, k := range old {
			n, err := c.execChanges(deletePushResult, k.Partition, k.ClientID, k.ClientCommitID)
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
