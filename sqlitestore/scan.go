package sqlitestore

import (
	"context"
	"fmt"
	"sort"
	"unsafe"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// ScanRows reads a page of current rows inside the scopes, by row id, on a
// scan connection (scanCachePages). Each value of the first effective key
// is read in row-id order from the row scope index and the streams are
// merged; rows are checked against all keys.
func (s *Store) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	if len(q.Scopes) == 0 {
		return nil, store.ErrScanRequiresScope
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("scan rows: limit %d must be positive", q.Limit)
	}
	t, err := s.table(q.Table)
	if err != nil {
		return nil, err
	}
	after := ""
	if q.After != nil {
		after = *q.After
	}
	first := q.Scopes[0]
	var out []store.Row // grows with the rows found: an empty scan allocates nothing
	for len(out) < q.Limit {
		var (
			page []store.Row
			more bool
		)
		// One read transaction: the dense read's two statements see
		// one snapshot.
		err := s.readTxOn(ctx, s.scanners, func(c *conn) error {
			var err error
			page, more, err = scanMerge(c, t, partition, q, first, after, q.Limit-len(out))
			return err
		})
		if err != nil {
			return nil, err
		}
		switch {
		case skipScopes(q) && out == nil:
			// Without decoded scopes (NoScopes, one key) every row came
			// from the index entry of the key's value: it matches, and
			// the page is the answer so far as it is.
			out = page
		case skipScopes(q):
			out = append(out, page...)
		default:
			for _, r := range page {
				if store.MatchScopes(r.Scopes, q.Scopes) {
					out = append(out, r)
				}
			}
		}
		if !more || len(page) == 0 {
			break
		}
		after = page[len(page)-1].RowID
	}
	return out, nil
}

// scanMerge reads up to limit rows after `after` for each value of the
// first key and returns the smallest limit of them in row-id order, and
// whether more rows may follow. A single value is read densely while that
// pays (scanDense), then by the join of the row scope index with the
// table (scanJoin, or scanJoinLean without the scopes column when they
// are not decoded).
func scanMerge(c *conn, t *tableSQL, partition string, q store.RowScanQuery, first wire.ScopeValues, after string, limit int) ([]store.Row, bool, error) {
	var (
		rb   = rowbuf.Buffer{Limit: limit}
		more bool
	)
	skip := skipScopes(q)
	query := t.scanJoin
	if skip {
		query = t.scanJoinLean
	}
	values := dedupe(first.Values)
	for _, v := range values {
		from, n := after, 0
		if len(values) == 1 {
			var (
				complete bool
				err      error
			)
			n, complete, err = scanDense(c, t, partition, q, first.Key, v, after, limit, &rb)
			if err != nil {
				return nil, false, fmt.Errorf("scan rows: %w", err)
			}
			if complete {
				more = n == limit
				continue
			}
			if n > 0 {
				from = rb.Rows()[rb.Len()-1].RowID
			}
		}
		rows, err := c.query(query, partition, q.Table, first.Key, v, from, limit-n)
		if err != nil {
			return nil, false, fmt.Errorf("scan rows: %w", err)
		}
		for rows.Next() {
			r, err := readScanRow(rows.st, q.Table, rows.st.ColumnText(0), skip, &rb)
			if err != nil {
				rows.Close()
				return nil, false, err
			}
			rb.Add(r)
			n++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, false, fmt.Errorf("scan rows: %w", err)
		}
		if n == limit {
			more = true
		}
	}
	all := rb.Rows()
	if len(values) > 1 {
		sort.Slice(all, func(i, j int) bool { return all[i].RowID < all[j].RowID })
	}
	if len(all) > limit {
		all = all[:limit]
		more = true
	}
	return all, more, nil
}

// readScanRow reads the current row of a scanJoin, scanJoinLean,
// scanRange or scanRangeLean statement (lean: no scopes column), whose
// row id (column 0) the caller read.
func readScanRow(st *sqlite.Stmt, table, rowID string, lean bool, rb *rowbuf.Buffer) (store.Row, error) {
	r := store.Row{Table: table, RowID: rowID, ServerVersion: st.ColumnInt64(1)}
	if lean {
		r.Payload, r.ColumnVersions = columnInto(rb, st, 2), columnInto(rb, st, 3)
		return r, nil
	}
	r.Payload, r.ColumnVersions = columnInto(rb, st, 3), columnInto(rb, st, 4)
	var err error
	r.Scopes, err = store.DecodeScopes(columnBytes(st, 2))
	return r, err
}

// denseGiveUp is the number of table rows outside the value a dense read
// passes over before it gives up, when they also outnumber the rows in
// it.
const denseGiveUp = 64

// scanDense reads the rows of one scope value after `after`, at most
// limit, by walking two ranges in row-id order side by side: the value's
// entries of the row scope index (scanIDs, index only) and the table's
// rows (scanRange, its primary key in order). A row of the table is a
// step along its key, not a search from the root for every entry as in
// the join: on the bundled SQLite the walk costs a fraction of the join
// when the value holds most of the table's rows in the range (one
// project's rows, a user's own table). When it does not, the table rows
// outside the value outnumber those in it, and the read gives up: it
// returns complete false with the rows found so far, and the caller reads
// the rest by the join after the last of them. So it does too when an
// index entry has no row (the join would skip it).
func scanDense(c *conn, t *tableSQL, partition string, q store.RowScanQuery, key, value, after string, limit int, rb *rowbuf.Buffer) (n int, complete bool, err error) {
	lean := skipScopes(q)
	return walkDense(c, t, partition, q, key, value, after, limit, func(st *sqlite.Stmt, id []byte) (bool, error) {
		r, err := readScanRow(st, q.Table, rb.String(id), lean, rb)
		if err != nil {
			return false, err
		}
		rb.Add(r)
		return true, nil
	})
}

// denseSink takes each row a dense walk finds: the statement stands on
// the row, whose id is id (a buffer the walk reuses). It returns false to
// end the walk, which then reports itself complete.
type denseSink func(st *sqlite.Stmt, id []byte) (bool, error)

// walkDense is scanDense handing each row to take.
func walkDense(c *conn, t *tableSQL, partition string, q store.RowScanQuery, key, value, after string, limit int, take denseSink) (n int, complete bool, err error) {
	lean := skipScopes(q)
	rangeSQL := t.scanRange
	if lean {
		rangeSQL = t.scanRangeLean
	}
	ids, err := c.query(scanIDsSQL, partition, q.Table, key, value, after, limit)
	if err != nil {
		return 0, false, err
	}
	defer ids.Close()
	rows, err := c.query(rangeSQL, partition, after)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	var (
		// The current index entry's and table row's ids, read into
		// reused buffers: a row's id becomes a string (cut from rb's
		// blocks) only when the row is taken.
		id, rowID []byte
		skipped   int
		hasRow    = rows.Next()
	)
	if hasRow {
		rowID = columnReuse(rows.st, 0, rowID)
	}
	for ids.Next() {
		id = columnReuse(ids.st, 0, id)
		for hasRow && string(rowID) < string(id) {
			skipped++
			if skipped > denseGiveUp && skipped > n {
				return n, false, nil
			}
			if hasRow = rows.Next(); hasRow {
				rowID = columnReuse(rows.st, 0, rowID)
			}
		}
		if !hasRow || string(rowID) != string(id) {
			return n, false, rows.Err()
		}
		more, err := take(rows.st, rowID)
		if err != nil {
			return n, false, err
		}
		n++
		if !more {
			return n, true, nil
		}
		if hasRow = rows.Next(); hasRow {
			rowID = columnReuse(rows.st, 0, rowID)
		}
	}
	if err := ids.Err(); err != nil {
		return n, false, err
	}
	return n, true, rows.Err()
}

// scanIDsSQL walks one scope value's entries of the row scope index after
// a row id, in order: the covering primary key alone.
const scanIDsSQL = `SELECT row_id FROM sync_row_scopes
WHERE partition=? AND tbl=? AND var=? AND value=? AND row_id > ?
ORDER BY row_id LIMIT ?`

// columnReuse reads column i's bytes into buf, reusing its capacity.
func columnReuse(st *sqlite.Stmt, i int, buf []byte) []byte {
	l := st.ColumnLen(i)
	if cap(buf) < l {
		buf = make([]byte, l, max(l, 64))
	}
	buf = buf[:l]
	st.ColumnBytes(i, buf)
	return buf
}

// columnInto reads column i as bytes into rb's blocks: nil for NULL.
func columnInto(rb *rowbuf.Buffer, st *sqlite.Stmt, i int) []byte {
	if st.ColumnType(i) == sqlite.TypeNull {
		return nil
	}
	b := rb.Alloc(st.ColumnLen(i))
	st.ColumnBytes(i, b)
	return b
}

// skipScopes reports a scan whose rows' scopes need not be decoded: the
// caller does not read them and the one key's index lookup proves the
// match.
func skipScopes(q store.RowScanQuery) bool { return q.NoScopes && len(q.Scopes) == 1 }

func dedupe(values []string) []string {
	if len(values) < 2 {
		return values
	}
	seen := make(map[string]bool, len(values))
	out := values[:0:0]
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// VisitRows implements store.RowVisitor. A scan of one value of one key
// whose scopes are not read (every bootstrap page) hands each row to
// visit as it steps over it, inside the read transaction, with its bytes
// in buffers the scan reuses: the dense walk, then (when it gives up) the
// join from the last row it visited, as scanMerge reads them. Any other
// scan is ScanRows' rows, visited in order.
func (s *Store) VisitRows(ctx context.Context, partition string, q store.RowScanQuery, visit func(r *store.Row) bool) error {
	if len(q.Scopes) != 1 || !skipScopes(q) || len(dedupe(q.Scopes[0].Values)) != 1 || q.Limit <= 0 {
		rows, err := s.ScanRows(ctx, partition, q)
		if err != nil {
			return err
		}
		store.VisitEach(rows, visit)
		return nil
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	t, err := s.table(q.Table)
	if err != nil {
		return err
	}
	after := ""
	if q.After != nil {
		after = *q.After
	}
	key, value := q.Scopes[0].Key, q.Scopes[0].Values[0]
	return s.readTxOn(ctx, s.scanners, func(c *conn) error {
		if err := visitOne(c, t, partition, q, key, value, after, q.Limit, visit); err != nil {
			return fmt.Errorf("scan rows: %w", err)
		}
		return nil
	})
}

// visitOne is scanMerge of one value without scopes, visiting the rows.
func visitOne(c *conn, t *tableSQL, partition string, q store.RowScanQuery, key, value, after string, limit int, visit func(r *store.Row) bool) error {
	var (
		r                  = store.Row{Table: q.Table}
		payload, cols, ids []byte
		last               []byte
		stopped            bool
	)
	take := func(st *sqlite.Stmt, id []byte) (bool, error) {
		r.RowID = unsafe.String(unsafe.SliceData(id), len(id))
		r.ServerVersion = st.ColumnInt64(1)
		payload = columnReuse(st, 2, payload)
		r.Payload = payload
		r.ColumnVersions = nil
		if st.ColumnType(3) != sqlite.TypeNull {
			cols = columnReuse(st, 3, cols)
			r.ColumnVersions = cols
		}
		last = append(last[:0], id...)
		if !visit(&r) {
			stopped = true
			return false, nil
		}
		return true, nil
	}
	n, complete, err := walkDense(c, t, partition, q, key, value, after, limit, take)
	if err != nil || stopped || complete {
		return err
	}
	from := after
	if n > 0 {
		from = string(last)
	}
	rows, err := c.query(t.scanJoinLean, partition, q.Table, key, value, from, limit-n)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		ids = columnReuse(rows.st, 0, ids)
		if more, err := take(rows.st, ids); err != nil || !more {
			return err
		}
	}
	return rows.Err()
}
