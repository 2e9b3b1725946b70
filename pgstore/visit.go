package pgstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
)

// int8OID is the type of the table walk's server_version column.
const int8OID = 20

// VisitRows implements store.RowVisitor. A page of one value of an
// ordered table whose scopes are not read (every bootstrap page) walks
// the table in key order (scanTableSQL) and hands each row of the value
// to visit from pgx's receive buffer as it arrives, with no []store.Row
// and no copy. When the walk cannot finish (the value is sparse there,
// or the rows did not arrive in the order the statement gives them), the
// rows after the last one visited are read by ScanRows and visited; any
// other scan is ScanRows' rows, visited.
func (s *Store) VisitRows(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	ts, err := s.table(q.Table)
	if err != nil {
		return err
	}
	if !ts.ordered || len(q.Scopes) != 1 || !q.NoScopes || q.Limit <= 0 {
		return s.visitScan(ctx, partition, q, visit)
	}
	first, _, ok := splitScopes(q.Scopes)
	if !ok {
		return nil // a key without values matches nothing
	}
	if len(first.Values) != 1 {
		return s.visitScan(ctx, partition, q, visit)
	}
	args := []any{partition, first.Key, first.Values[0], int64(q.Limit)}
	walk := ts.scanTableFirst
	if q.After != nil {
		walk, args = ts.scanTableAfter, append(args, *q.After)
	}
	rows, err := s.pool.Query(ctx, walk, args...)
	if err != nil {
		return fmt.Errorf("scan rows: %w", err)
	}
	n, last, done, err := visitTableRows(rows, q.Table, q.Limit, visit)
	if err != nil {
		return fmt.Errorf("scan rows: %w", err)
	}
	if done {
		return nil
	}
	if n > 0 {
		q.After, q.Limit = &last, q.Limit-n
	}
	return s.visitScan(ctx, partition, q, visit)
}

// visitScan visits ScanRows' rows.
func (s *Store) visitScan(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	rows, err := s.ScanRows(ctx, partition, q)
	if err != nil {
		return err
	}
	store.VisitEach(rows, visit)
	return nil
}

// boolOID is the type of the table walk's match column.
const boolOID = 16

// visitTableRows reads a table walk (scanTableSQL), visiting each row of
// the value as it arrives. It reports done when the rows of the value up
// to limit were all visited (limit of them, or the walk reached the
// partition's end) or visit stopped; otherwise n rows were visited, the
// last of them last, and the caller reads the rest: more than denseSlack
// rows outside the value came between two of its rows (sparse), the rows
// did not arrive in bytewise order, or the columns are not in the binary
// formats read here.
func visitTableRows(rows pgx.Rows, table string, limit int, visit func(r *store.Row) bool) (n int, last string, done bool, err error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if len(fds) != 5 || fds[1].DataTypeOID != int8OID || fds[1].Format != pgx.BinaryFormatCode ||
		fds[2].DataTypeOID != boolOID || fds[2].Format != pgx.BinaryFormatCode ||
		fds[3].Format != pgx.BinaryFormatCode || fds[4].Format != pgx.BinaryFormatCode {
		return 0, "", false, nil
	}
	var (
		ids     rowbuf.Arena
		prev    []byte // the previous row's id
		skipped int    // rows outside the value since the last visited
		read    int
		r       = store.Row{Table: table}
	)
	for rows.Next() {
		vals := rows.RawValues()
		read++
		if len(vals[1]) != 8 || len(vals[2]) != 1 {
			return n, last, false, fmt.Errorf("table walk: columns of %d and %d bytes", len(vals[1]), len(vals[2]))
		}
		id := vals[0]
		if read > 1 && string(id) <= string(prev) {
			return n, last, false, nil
		}
		prev = append(prev[:0], id...)
		if vals[2][0] == 0 {
			if skipped++; skipped > denseSlack {
				return n, last, false, nil
			}
			continue
		}
		skipped = 0
		r.RowID, r.ServerVersion, r.Payload, r.ColumnVersions = ids.String(id), int64(binary.BigEndian.Uint64(vals[1])), vals[3], vals[4]
		if len(r.ColumnVersions) == 0 {
			r.ColumnVersions = nil
		}
		n++
		last = r.RowID
		if !visit(&r) || n == limit {
			return n, last, true, nil
		}
	}
	if err := rows.Err(); err != nil {
		return n, last, false, err
	}
	// Fewer rows than asked for: the walk reached the partition's end.
	return n, last, read < limit+denseSlack, nil
}
