package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

var _ store.RemoteQuerier = (*Store)(nil)

// RemoteTarget implements store.RemoteQuerier: Postgres, tables in the
// schema the connections' search_path selected at Open.
func (s *Store) RemoteTarget() store.RemoteTarget {
	return store.RemoteTarget{Dialect: store.DialectPostgres, Schema: s.dbSchema}
}

// RemoteQuery implements store.RemoteQuerier. The statement runs on a
// pooled connection in a read-only REPEATABLE READ transaction (Postgres
// refuses any write in it), which first reads the partition's
// maxCommitSeq: the snapshot is taken by that first statement, so both
// reads see the same commits.
func (s *Store) RemoteQuery(ctx context.Context, partition string, rs store.RemoteStatement) (store.RemoteResult, error) {
	if err := s.check(); err != nil {
		return store.RemoteResult{}, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.RemoteResult{}, fmt.Errorf("remote query: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var res store.RemoteResult
	err = tx.QueryRow(ctx, "SELECT max_commit_seq FROM sync_partitions WHERE partition = $1", partition).Scan(&res.MaxCommitSeq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return store.RemoteResult{}, fmt.Errorf("remote query: read max commit seq: %w", err)
	}
	rows, err := tx.Query(ctx, rs.SQL, rs.Args...)
	if err != nil {
		return store.RemoteResult{}, err
	}
	defer rows.Close()
	for _, fd := range rows.FieldDescriptions() {
		res.Columns = append(res.Columns, fd.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return store.RemoteResult{}, err
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return store.RemoteResult{}, err
	}
	return res, nil
}
