package sqlitestore

import (
	"context"
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// boundarySQL steps over one page of a scope value's index entries and
// reads the entry ending it and the one after: SQLite walks the covering
// primary key of sync_row_scopes (partition, tbl, var, value, row_id) and
// hands back two entries, whatever the page size.
const boundarySQL = `SELECT row_id FROM sync_row_scopes
WHERE partition=? AND tbl=? AND var=? AND value=? AND row_id > ?
ORDER BY row_id LIMIT 2 OFFSET ?`

// boundaryIDsSQL reads the row ids of one scope value in order (the walk
// of several values, merged in Go).
const boundaryIDsSQL = `SELECT row_id FROM sync_row_scopes
WHERE partition=? AND tbl=? AND var=? AND value=? AND row_id > ?
ORDER BY row_id LIMIT ?`

// PageBoundaries implements store.Store: the boundaries of
// WalkPageBoundaries, collected.
func (s *Store) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	var out []string
	if err := s.WalkPageBoundaries(ctx, partition, q, pages, func(id string) { out = append(out, id) }); err != nil {
		return nil, err
	}
	return out, nil
}

var _ store.BoundaryWalker = (*Store)(nil)

// WalkPageBoundaries implements store.BoundaryWalker: one read
// transaction over the row scope index, no row of the table read, on a
// scan connection. One scope value is walked a page at a time, each
// boundary handed on as its step finds it; several values are merged
// whole first.
func (s *Store) WalkPageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int, found func(rowID string)) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if len(q.Scopes) == 0 {
		return store.ErrScanRequiresScope
	}
	if len(q.Scopes) > 1 {
		return store.ErrBoundariesOneKey
	}
	if q.Limit <= 0 || pages <= 0 {
		return fmt.Errorf("page boundaries: limit %d and pages %d must be positive", q.Limit, pages)
	}
	if _, err := s.table(q.Table); err != nil {
		return err
	}
	after := ""
	if q.After != nil {
		after = *q.After
	}
	key, values := q.Scopes[0].Key, dedupe(q.Scopes[0].Values)
	return s.readTxOn(ctx, s.scanners, func(c *conn) error {
		if len(values) == 1 {
			return boundariesOne(c, partition, q.Table, key, values[0], after, q.Limit, pages, found)
		}
		// Several values: the ids of each, merged. A row has one value
		// per key, so the streams do not overlap; Compact guards anyway.
		var ids []string
		for _, v := range values {
			rows, err := c.query(boundaryIDsSQL, partition, q.Table, key, v, after, q.Limit*pages+1)
			if err != nil {
				return fmt.Errorf("page boundaries: %w", err)
			}
			for rows.Next() {
				ids = append(ids, rows.st.ColumnText(0))
			}
			err = rows.Err()
			rows.Close()
			if err != nil {
				return fmt.Errorf("page boundaries: %w", err)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		for i, n := q.Limit, 0; i < len(ids) && n < pages; i, n = i+q.Limit, n+1 {
			found(ids[i-1])
		}
		return nil
	})
}

// boundariesOne walks one scope value's index entries a page at a time.
func boundariesOne(c *conn, partition, table, key, value, after string, limit, pages int, found func(string)) error {
	for n := 0; n < pages; n++ {
		rows, err := c.query(boundarySQL, partition, table, key, value, after, limit-1)
		if err != nil {
			return fmt.Errorf("page boundaries: %w", err)
		}
		var got [2]string
		k := 0
		for rows.Next() {
			if k < len(got) {
				got[k] = rows.st.ColumnText(0)
			}
			k++
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("page boundaries: %w", err)
		}
		if k < 2 { // the page is not full, or nothing follows it
			return nil
		}
		found(got[0])
		after = got[0]
	}
	return nil
}

var _ store.ScopeRowCounter = (*Store)(nil)

// countScopeRowsSQL counts at most ? index entries of one scope value.
const countScopeRowsSQL = `SELECT count(*) FROM (SELECT 1 FROM sync_row_scopes
WHERE partition=? AND tbl=? AND var=? AND value=? LIMIT ?)`

// CountScopeRows implements store.ScopeRowCounter from the row scope
// index, value by value (a row holds one value per variable), in one read
// transaction on a scan connection.
func (s *Store) CountScopeRows(ctx context.Context, partition, table string, scope wire.ScopeValues, limit int) (int, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	if _, err := s.table(table); err != nil {
		return 0, err
	}
	values := dedupe(scope.Values)
	n := 0
	err := s.readTxOn(ctx, s.scanners, func(c *conn) error {
		n = 0
		for _, v := range values {
			if n >= limit {
				return nil
			}
			var got int64
			if err := c.queryRow(countScopeRowsSQL, partition, table, scope.Key, v, limit-n).Scan(&got); err != nil {
				return err
			}
			n += int(got)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count scope rows: %w", err)
	}
	return min(n, limit), nil
}
