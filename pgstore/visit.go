package pgstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
)

// int8OID is the type of the dense scan's server_version column.
const int8OID = 20

// VisitRows implements store.RowVisitor. The dense scan of one value of
// an ordered table whose scopes are not read (every bootstrap page) is
// visited as it arrives: once the page's index entries are in, each
// window row that is an entry's is handed to visit from pgx's receive
// buffer, with no []store.Row and no copy. When the dense read cannot
// finish (an entry without its row in the window, or entries and window
// not in the order the statement gives them), the rows after the last
// one visited are read by ScanRows and visited; any other scan is
// ScanRows' rows, visited.
func (s *Store) VisitRows(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	ts, err := s.table(q.Table)
	if err != nil {
		return err
	}
	if !ts.ordered || len(q.Scopes) != 1 || !q.NoScopes || q.Limit <= 0 {
		return s.visitScan(ctx, partition, q, visit)
	}
	first, rest, ok := splitScopes(q.Scopes)
	if !ok {
		return nil // a key without values matches nothing
	}
	if len(first.Values) != 1 {
		return s.visitScan(ctx, partition, q, visit)
	}
	args := []any{partition, ts.name, first.Values, first.Key, rest, q.Limit}
	dense := ts.scanDenseFirst[0]
	if q.After != nil {
		dense, args = ts.scanDenseAfter[0], append(args, *q.After)
	}
	rows, err := s.pool.Query(ctx, dense, args...)
	if err != nil {
		return fmt.Errorf("scan rows: %w", err)
	}
	n, last, done, err := visitDenseRows(rows, q.Table, q.Limit, visit)
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

// visitDenseRows reads a dense scan without scopes (scanDenseSQL) as
// collectDenseRows does, visiting each entry's row as its window row
// arrives. It reports done when every entry's row was visited or visit
// stopped; otherwise n rows were visited, the last of them last, and the
// caller reads the rest: an entry has no row in the window, or the
// entries and the window did not arrive as the statement orders them
// (entries first, each in bytewise order), or the columns are not in the
// binary formats read here.
func visitDenseRows(rows pgx.Rows, table string, limit int, visit func(r *store.Row) bool) (n int, last string, done bool, err error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if len(fds) != 5 || fds[1].DataTypeOID != int8OID || fds[1].Format != pgx.BinaryFormatCode ||
		fds[3].Format != pgx.BinaryFormatCode || fds[4].Format != pgx.BinaryFormatCode {
		return 0, "", false, nil
	}
	var (
		ids     rowbuf.Arena
		entries []string
		k       int // the next entry to find in the window
		window  bool
		prev    []byte // the previous window row's id
		r       = store.Row{Table: table}
	)
	for rows.Next() {
		vals := rows.RawValues()
		if len(vals[1]) != 8 {
			return n, last, false, fmt.Errorf("dense scan: server version of %d bytes", len(vals[1]))
		}
		version := int64(binary.BigEndian.Uint64(vals[1]))
		id := vals[0]
		if version < 0 {
			if window || (len(entries) > 0 && string(id) <= entries[len(entries)-1]) {
				return n, last, false, nil
			}
			entries = rowbuf.Append(entries, limit, ids.String(id))
			continue
		}
		if window && string(id) <= string(prev) {
			return n, last, false, nil
		}
		window = true
		prev = append(prev[:0], id...)
		if k == len(entries) || string(id) < entries[k] {
			continue // a row outside the value
		}
		if string(id) > entries[k] {
			return n, last, false, nil // entry k has no row in the window
		}
		r.RowID, r.ServerVersion, r.Payload, r.ColumnVersions = entries[k], version, vals[3], vals[4]
		if len(r.ColumnVersions) == 0 {
			r.ColumnVersions = nil
		}
		k++
		n++
		last = r.RowID
		if !visit(&r) {
			return n, last, true, nil
		}
	}
	if err := rows.Err(); err != nil {
		return n, last, false, err
	}
	return n, last, k == len(entries), nil
}
