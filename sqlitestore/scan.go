package sqlitestore

import (
	"context"
	"fmt"
	"sort"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// ScanRows reads a page of current rows inside the scopes, by row id, on a
// scan connection (scanMmapBytes). Each value of the first effective key
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
	query := t.scanJoin
	if skipScopes(q) {
		query = t.scanJoinLean
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
		err := s.scan(ctx, func(c *conn) error {
			var err error
			page, more, err = scanMerge(c, query, partition, q, first, after, q.Limit-len(out))
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
// whether more rows may follow. The query is the table's scanJoin, or
// scanJoinLean (no scopes column) when the scopes are not decoded.
func scanMerge(c *conn, query, partition string, q store.RowScanQuery, first wire.ScopeValues, after string, limit int) ([]store.Row, bool, error) {
	var (
		rb   = rowbuf.Buffer{Limit: limit}
		more bool
	)
	skip := skipScopes(q)
	for _, v := range dedupe(first.Values) {
		rows, err := c.query(query, partition, q.Table, first.Key, v, after, limit)
		if err != nil {
			return nil, false, fmt.Errorf("scan rows: %w", err)
		}
		n := 0
		for rows.Next() {
			st := rows.st
			r := store.Row{Table: q.Table, RowID: st.ColumnText(0), ServerVersion: st.ColumnInt64(1)}
			if skip {
				r.Payload, r.ColumnVersions = columnInto(&rb, st, 2), columnInto(&rb, st, 3)
			} else {
				r.Payload, r.ColumnVersions = columnInto(&rb, st, 3), columnInto(&rb, st, 4)
				if r.Scopes, err = store.DecodeScopes(columnBytes(st, 2)); err != nil {
					rows.Close()
					return nil, false, err
				}
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
	if len(first.Values) > 1 {
		sort.Slice(all, func(i, j int) bool { return all[i].RowID < all[j].RowID })
	}
	if len(all) > limit {
		all = all[:limit]
		more = true
	}
	return all, more, nil
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
