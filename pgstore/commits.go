package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

const sqlReadCommits = `WITH c AS (
  SELECT commit_seq, created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
   WHERE partition = $1 AND commit_seq > $2 AND commit_seq <= $3 ORDER BY commit_seq LIMIT $4)
SELECT c.commit_seq, c.created_at_ms, c.actor_id, c.client_id, c.client_commit_id,
       ch.tbl, ch.row_id, ch.op, ch.row_version, ch.scopes::text, ch.payload
  FROM c LEFT JOIN sync_changes ch ON ch.partition = $1 AND ch.commit_seq = c.commit_seq
 ORDER BY c.commit_seq, ch.idx`

// ReadCommits reads whole commits of a window, oldest first.
func (s *Store) ReadCommits(ctx context.Context, partition string, afterSeq, throughSeq int64, limit int) ([]store.Commit, error) {
	return retry(s, ctx, "ReadCommits", func() ([]store.Commit, error) { return s.readCommitsOnce(ctx, partition, afterSeq, throughSeq, limit) })
}

// readCommitsOnce is ReadCommits, once (see "Lost connections", retry.go).
func (s *Store) readCommitsOnce(ctx context.Context, partition string, afterSeq, throughSeq int64, limit int) ([]store.Commit, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sqlReadCommits, partition, afterSeq, throughSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("read commits: %w", err)
	}
	defer rows.Close()
	var out []store.Commit
	for rows.Next() {
		var (
			c       store.Commit
			tbl     pgtype.Text
			rowID   pgtype.Text
			op      pgtype.Int2
			version pgtype.Int8
			scopes  pgtype.Text
			payload []byte
		)
		if err := rows.Scan(&c.Seq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID,
			&tbl, &rowID, &op, &version, &scopes, &payload); err != nil {
			return nil, fmt.Errorf("read commits: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].Seq != c.Seq {
			out = append(out, c)
		}
		if !tbl.Valid {
			continue
		}
		ch := store.Change{Table: tbl.String, RowID: rowID.String, Op: wire.Op(op.Int16), RowVersion: version.Int64, Payload: payload}
		if ch.Scopes, err = decodeScopes([]byte(scopes.String)); err != nil {
			return nil, err
		}
		last := &out[len(out)-1]
		last.Changes = append(last.Changes, ch)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read commits: %w", err)
	}
	return out, nil
}
