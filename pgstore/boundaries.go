package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// sqlWalkIDs is the walk's cursor over the first $6 row ids after $5 of
// the scope values $4 of key $3 in bytewise order, from the primary key of
// sync_row_scopes alone (one ordered, limited range per value, as scanSQL
// reads them; row_id is COLLATE "C"), merged. No row of the app table is
// read.
const sqlWalkIDs = `SELECT r.row_id
  FROM unnest($4::text[]) AS v(value)
  CROSS JOIN LATERAL (
    SELECT s.row_id FROM sync_row_scopes s
     WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $3 AND s.value = v.value
       AND s.row_id COLLATE "C" > $5
     ORDER BY s.row_id COLLATE "C"
     LIMIT $6) r
 ORDER BY r.row_id COLLATE "C"
 LIMIT $6`

// sqlWalkIDsOne is sqlWalkIDs for a single scope value ($4): its range of
// the row scope key is in row-id order already, so the cursor reads the
// index as it is, with no merge of values and no sort (the sort of
// 100,000 entries, spilled to disk at the default work_mem, was most of a
// 100,000-row walk).
const sqlWalkIDsOne = `SELECT s.row_id FROM sync_row_scopes s
 WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $3 AND s.value = $4
   AND s.row_id COLLATE "C" > $5
 ORDER BY s.row_id COLLATE "C"
 LIMIT $6`

// walkCursor names the walk's cursor (one per transaction).
const walkCursor = "sync_walk"

// PageBoundaries implements store.Store with a cursor over the row scope
// index in one read-only transaction (one snapshot): each step skips a
// page of entries on the server (MOVE, nothing sent) and fetches the
// entry ending the page and the one after it, one round trip per page.
// Numbering every entry in one statement (a window function) cost its
// backend half as much again. Bootstraps do not ask for it (ChainPages);
// catch-ups ask CountScopeRows.
func (s *Store) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	return retry(s, ctx, "PageBoundaries", func() ([]string, error) { return s.pageBoundariesOnce(ctx, partition, q, pages) })
}

// pageBoundariesOnce is PageBoundaries, once (see "Lost connections", retry.go).
func (s *Store) pageBoundariesOnce(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
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
	sql, values := sqlWalkIDs, any(first.Values)
	if len(first.Values) == 1 {
		sql, values = sqlWalkIDsOne, first.Values[0]
	}
	var out []string
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DECLARE "+walkCursor+" NO SCROLL CURSOR FOR "+sql, partition, q.Table, first.Key, values, after,
			int64(q.Limit)*int64(pages)+1); err != nil {
			return err
		}
		var err error
		out, err = walkSteps(ctx, tx.Conn().PgConn(), q.Limit, pages)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("page boundaries: %w", err)
	}
	return out, nil
}

// walkSteps steps the walk's cursor a page at a time and returns the
// boundaries: it skips to the entry ending page n+1 ((n+1)*limit) and
// fetches it and the one after it. One-row pages are fetched at once (pages+1 entries): the row after
// a boundary is then the next boundary, and a NO SCROLL cursor does not
// step back.
func walkSteps(ctx context.Context, conn *pgconn.PgConn, limit, pages int) ([]string, error) {
	var out []string
	if limit == 1 {
		res, err := conn.Exec(ctx, fmt.Sprintf("FETCH %d FROM %s", pages+1, walkCursor)).ReadAll()
		if err != nil {
			return nil, err
		}
		rows := res[0].Rows
		for i := 0; i+1 < len(rows) && i < pages; i++ {
			out = append(out, string(rows[i][0]))
		}
		return out, nil
	}
	moved := 0 // entries passed: the cursor is on entry `moved`
	for n := 0; n < pages; n++ {
		sql := "FETCH 2 FROM " + walkCursor
		skip := (n+1)*limit - 1 - moved
		if skip > 0 {
			sql = fmt.Sprintf("MOVE FORWARD %d IN %s; %s", skip, walkCursor, sql)
		}
		res, err := conn.Exec(ctx, sql).ReadAll()
		if err != nil {
			return nil, err
		}
		rows := res[len(res)-1].Rows
		if len(rows) < 2 { // the page is not full, or nothing follows it
			return out, nil
		}
		out = append(out, string(rows[0][0]))
		moved += skip + 2
	}
	return out, nil
}

var _ store.PageChainer = (*Store)(nil)

// ChainPages implements store.PageChainer: bootstraps read Postgres pages
// as a chain. The boundary walk checks every index entry's row version in
// sync_row_scopes, as a page's table walk checks its rows', so a planned
// bootstrap visited every row twice; on a fresh seed it also set the hint
// bits of both tables' rows (cold 100,000-row bootstraps of a seeded
// scope: medians 218 ms planned, 181 chained; seeded just before: 280.5
// against 148.5; BENCHMARKS.md, "Round twenty-five").
func (s *Store) ChainPages() bool { return true }

var _ store.ScopeRowCounter = (*Store)(nil)

// sqlCountScopeRows counts at most $5 entries of the row scope index of
// the values $4 of key $3, in no order (no sort, no window).
const sqlCountScopeRows = `SELECT count(*) FROM (SELECT 1 FROM sync_row_scopes
 WHERE partition = $1 AND tbl = $2 AND var = $3 AND value = ANY($4::text[]) LIMIT $5) s`

// CountScopeRows implements store.ScopeRowCounter in one statement over
// the row scope index.
func (s *Store) CountScopeRows(ctx context.Context, partition, table string, scope wire.ScopeValues, limit int) (int, error) {
	return retry(s, ctx, "CountScopeRows", func() (int, error) { return s.countScopeRowsOnce(ctx, partition, table, scope, limit) })
}

// countScopeRowsOnce is CountScopeRows, once (see "Lost connections", retry.go).
func (s *Store) countScopeRowsOnce(ctx context.Context, partition, table string, scope wire.ScopeValues, limit int) (int, error) {
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
