package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/store"
)

var _ store.RemoteQuerier = (*Store)(nil)

// RemoteTarget implements store.RemoteQuerier: SQLite, tables in main.
func (s *Store) RemoteTarget() store.RemoteTarget {
	return store.RemoteTarget{Dialect: store.DialectSQLite, Schema: "main"}
}

// RemoteQuery implements store.RemoteQuerier. The statement runs on a read
// connection (query_only: it cannot write) inside one read transaction,
// which also reads the partition's maxCommitSeq, so both come from one
// snapshot.
func (s *Store) RemoteQuery(ctx context.Context, partition string, rs store.RemoteStatement) (store.RemoteResult, error) {
	var res store.RemoteResult
	err := s.readTx(ctx, func(c *conn) error {
		if rs.ServeGate {
			g, err := serveGateOn(c, partition, rs.Running)
			if err != nil {
				return err
			}
			res.Gate = &g
		}
		if !rs.NoCommitSeq {
			err := c.queryRow("SELECT max_commit_seq FROM sync_partitions WHERE partition = ?", partition).Scan(&res.MaxCommitSeq)
			if err != nil && !errors.Is(err, errNoRows) {
				return fmt.Errorf("read max commit seq: %w", err)
			}
		}
		st, err := c.bound(rs.SQL, rs.Args)
		if err != nil {
			return err
		}
		defer release(st)
		n := st.ColumnCount()
		res.Columns = make([]string, n)
		for i := range n {
			res.Columns[i] = st.ColumnName(i)
		}
		for {
			more, err := st.Step()
			if err != nil {
				return err
			}
			if !more {
				return nil
			}
			row := make([]any, n)
			for i := range n {
				switch st.ColumnType(i) {
				case sqlite.TypeInteger:
					row[i] = st.ColumnInt64(i)
				case sqlite.TypeFloat:
					row[i] = st.ColumnFloat(i)
				case sqlite.TypeText:
					row[i] = st.ColumnText(i)
				case sqlite.TypeBlob:
					row[i] = columnBytes(st, i)
				}
			}
			res.Rows = append(res.Rows, row)
		}
	})
	if err != nil {
		return store.RemoteResult{}, err
	}
	return res, nil
}
