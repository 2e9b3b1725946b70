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
	// Run again after a lost connection only while no row was visited:
	// the caller has consumed the rows it was handed.
	visited := false
	seen := func(r *store.Row) bool {
		visited = true
		return visit(r)
	}
	for attempt := 0; ; attempt++ {
		err := s.visitRowsOnce(ctx, partition, q, seen)
		if err == nil || !connLost(err) {
			return err
		}
		s.noteLost()
		if visited || attempt == maxConnRetries || ctx.Err() != nil {
			return err
		}
		s.retried(ctx, "VisitRows", attempt, err)
	}
}

// visitRowsOnce is VisitRows, once (see "Lost connections", retry.go).
func (s *Store) visitRowsOnce(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
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
	// A first, short walk: a value with few rows in a large partition
	// gives up after reading a few hundred of its rows, not a page's.
	want := min(q.Limit, firstWalk) // rows of the value the walk is for
	budget := want                  // rows the walk reads (and denseSlack more)
	for {
		args := []any{partition, first.Key, first.Values[0], int64(budget), ts.name}
		walk := ts.scanTableFirst
		if q.After != nil {
			walk, args = ts.scanTableAfter, append(args, *q.After)
		}
		rows, err := s.pool.Query(ctx, walk, args...)
		if err != nil {
			return fmt.Errorf("scan rows: %w", err)
		}
		n, last, read, end, err := visitTableRows(rows, q.Table, want, budget, visit)
		if err != nil {
			return fmt.Errorf("scan rows: %w", err)
		}
		if n > 0 {
			q.After, q.Limit = &last, q.Limit-n
		}
		switch {
		case end == walkGaveUp:
			return s.visitScan(ctx, partition, q, visit)
		case end == walkDone || q.Limit == 0:
			return nil
		}
		// Dense enough so far (walkFull, walkShort): the rest of the
		// page at once, from the last row visited, reading as many rows
		// as the density seen so far takes for it.
		want, budget = q.Limit, q.Limit
		if end == walkShort {
			budget = min(q.Limit*walkDensity, q.Limit*read/n+1)
		}
	}
}

// firstWalk is how many rows of the value a page's first table walk
// reads (VisitRows).
const firstWalk = 256

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

// walkEnd is how a table walk (visitTableRows) ended.
type walkEnd int

const (
	walkFull   walkEnd = iota // limit rows of the value visited
	walkDone                  // the partition's end reached, or visit stopped
	walkShort                 // every row read, fewer than limit of the value: walk on
	walkGaveUp                // the caller reads the rest another way
)

// walkDensity: a walk that read all its rows goes on (walkShort) when at
// least one in this many was of the value; a sparser value is read by
// the probing scan, which costs one key probe per row of the value.
const walkDensity = 4

// visitTableRows reads a table walk (scanTableSQL) of budget rows and
// denseSlack more, visiting each row of the value as it arrives, until
// limit were visited (walkFull), the walk reached the partition's end or
// visit stopped (walkDone), every row was read with fewer than limit of
// the value but at least one in walkDensity (walkShort), or it gives up
// (walkGaveUp: more than denseSlack rows outside the value came between
// two of its rows, or fewer than one in walkDensity was of the value, or
// the rows did not arrive in bytewise order, or the columns are not in
// the binary formats read here). n rows were visited, the last of them
// last, of the read rows read.
func visitTableRows(rows pgx.Rows, table string, limit, budget int, visit func(r *store.Row) bool) (n int, last string, read int, end walkEnd, err error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if len(fds) != 5 || fds[1].DataTypeOID != int8OID || fds[1].Format != pgx.BinaryFormatCode ||
		fds[2].DataTypeOID != boolOID || fds[2].Format != pgx.BinaryFormatCode ||
		fds[3].Format != pgx.BinaryFormatCode || fds[4].Format != pgx.BinaryFormatCode {
		return 0, "", 0, walkGaveUp, nil
	}
	var (
		ids     rowbuf.Arena
		prev    []byte // the previous row's id
		skipped int    // rows outside the value since the last visited
		r       = store.Row{Table: table}
	)
	for rows.Next() {
		vals := rows.RawValues()
		read++
		if len(vals[1]) != 8 || len(vals[2]) != 1 {
			return n, last, read, walkGaveUp, fmt.Errorf("table walk: columns of %d and %d bytes", len(vals[1]), len(vals[2]))
		}
		id := vals[0]
		if read > 1 && string(id) <= string(prev) {
			return n, last, read, walkGaveUp, nil
		}
		prev = append(prev[:0], id...)
		if vals[2][0] == 0 {
			if skipped++; skipped > denseSlack {
				return n, last, read, walkGaveUp, nil
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
		if !visit(&r) {
			return n, last, read, walkDone, nil
		}
		if n == limit {
			return n, last, read, walkFull, nil
		}
	}
	if err := rows.Err(); err != nil {
		return n, last, read, walkGaveUp, err
	}
	switch {
	case read < budget+denseSlack:
		return n, last, read, walkDone, nil // fewer rows than asked for: the partition's end
	case n*walkDensity >= read:
		return n, last, read, walkShort, nil
	}
	return n, last, read, walkGaveUp, nil
}
