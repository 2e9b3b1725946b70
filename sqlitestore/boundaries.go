package sqlitestore

import (
	"context"
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/store"
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

// PageBoundaries implements store.Store: one read transaction over the row
// scope index, no row of the table read, on a scan connection.
func (s *Store) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	if len(q.Scopes) == 0 {
		return nil, store.ErrScanRequiresScope
	}
	if len(q.Scopes) > 1 {
		return nil, store.ErrBoundariesOneKey
	}
	if q.Limit <= 0 || pages <= 0 {
		return nil, fmt.Errorf("page boundaries: limit %d and pages %d must be positive", q.Limit, pages)
	}
	if _, err := s.table(q.Table); err != nil {
		return nil, err
	}
	after := ""
	if q.After != nil {
		after = *q.After
	}
	key, values := q.Scopes[0].Key, dedupe(q.Scopes[0].Values)
	var out []string
	err := s.readTxOn(ctx, s.scanners, func(c *conn) error {
		out = nil
		if len(values) == 1 {
			var err error
			out, err = boundariesOne(c, partition, q.Table, key, values[0], after, q.Limit, pages)
			return err
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
		for i := q.Limit; i < len(ids) && len(out) < pages; i += q.Limit {
			out = append(out, ids[i-1])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// boundariesOne walks one scope value's index entries a page at a time.
func boundariesOne(c *conn, partition, table, key, value, after string, limit, pages int) ([]string, error) {
	var out []string
	for len(out) < pages {
		rows, err := c.query(boundarySQL, partition, table, key, value, after, limit-1)
		if err != nil {
			return nil, fmt.Errorf("page boundaries: %w", err)
		}
		var got []string
		for rows.Next() {
			got = append(got, rows.st.ColumnText(0))
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("page boundaries: %w", err)
		}
		if len(got) < 2 { // the page is not full, or nothing follows it
			break
		}
		out = append(out, got[0])
		after = got[0]
	}
	return out, nil
}
