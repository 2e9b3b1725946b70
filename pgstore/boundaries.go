package pgstore

import (
	"context"
	"fmt"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// sqlPageBoundaries numbers the first $6 row ids after $5 of the scope
// values $4 of key $3 in bytewise order, from the primary key of
// sync_row_scopes alone (one ordered, limited range per value, as scanSQL
// reads them; row_id is COLLATE "C"), and returns those that end a page of
// $7 rows and those that follow one: a page end is a boundary when the
// next row exists. No row of the app table is read.
const sqlPageBoundaries = `SELECT w.row_id, w.n FROM (
  SELECT r.row_id, row_number() OVER (ORDER BY r.row_id COLLATE "C") AS n
    FROM (SELECT r.row_id
            FROM unnest($4::text[]) AS v(value)
            CROSS JOIN LATERAL (
              SELECT s.row_id FROM sync_row_scopes s
               WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $3 AND s.value = v.value
                 AND s.row_id COLLATE "C" > $5
               ORDER BY s.row_id COLLATE "C"
               LIMIT $6) r
           ORDER BY r.row_id COLLATE "C"
           LIMIT $6) r) w
 WHERE w.n % $7 IN (0, 1 % $7)
 ORDER BY w.n`

// sqlPageBoundariesOne is sqlPageBoundaries for a single scope value ($4):
// its range of the row scope key is in row-id order already, so the
// entries are numbered as the index returns them, with no merge of
// values and no sort of them (the sort of 100,000 entries, spilled to
// disk at the default work_mem, was most of a 100,000-row walk).
// Whatever index Postgres picks, the walk is one pass: a walk stepping
// from boundary to boundary (OFFSET per page) was tried, and without
// statistics Postgres ran each step over sync_row_scopes_by_row from the
// start of the table's entries.
const sqlPageBoundariesOne = `SELECT w.row_id, w.n FROM (
  SELECT s.row_id, row_number() OVER (ORDER BY s.row_id COLLATE "C") AS n
    FROM sync_row_scopes s
   WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $3 AND s.value = $4
     AND s.row_id COLLATE "C" > $5
   ORDER BY s.row_id COLLATE "C"
   LIMIT $6) w
 WHERE w.n % $7 IN (0, 1 % $7)
 ORDER BY w.n`

// PageBoundaries implements store.Store in one statement over the row
// scope index.
func (s *Store) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(q.Scopes) == 0 {
		return nil, scanRequiresScope()
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
	first, _, ok := splitScopes(q.Scopes)
	if !ok {
		return nil, nil
	}
	after := ""
	if q.After != nil {
		after = *q.After
	}
	sql, values := sqlPageBoundaries, any(first.Values)
	if len(first.Values) == 1 {
		sql, values = sqlPageBoundariesOne, first.Values[0]
	}
	rows, err := s.pool.Query(ctx, sql, partition, q.Table, first.Key, values, after,
		int64(q.Limit)*int64(pages)+1, int64(q.Limit))
	if err != nil {
		return nil, fmt.Errorf("page boundaries: %w", err)
	}
	defer rows.Close()
	var (
		out     []string
		pending string // a page end waiting for the row after it
		pendN   int64  = -1
	)
	for rows.Next() {
		var (
			id string
			n  int64
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("page boundaries: %w", err)
		}
		if pendN >= 0 && n == pendN+1 && len(out) < pages {
			out = append(out, pending)
		}
		pendN = -1
		if n%int64(q.Limit) == 0 {
			pending, pendN = id, n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("page boundaries: %w", err)
	}
	return out, nil
}

var _ store.ScopeRowCounter = (*Store)(nil)

// sqlCountScopeRows counts at most $5 entries of the row scope index of
// the values $4 of key $3, in no order (no sort, no window).
const sqlCountScopeRows = `SELECT count(*) FROM (SELECT 1 FROM sync_row_scopes
 WHERE partition = $1 AND tbl = $2 AND var = $3 AND value = ANY($4::text[]) LIMIT $5) s`

// CountScopeRows implements store.ScopeRowCounter in one statement over
// the row scope index.
func (s *Store) CountScopeRows(ctx context.Context, partition, table string, scope wire.ScopeValues, limit int) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if _, err := s.table(table); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sqlCountScopeRows, partition, table, scope.Key, scope.Values, int64(limit)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count scope rows: %w", err)
	}
	return int(n), nil
}
