package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/rowbuf"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Row returns a committed current row.
func (s *Store) Row(ctx context.Context, partition, table, rowID string) (store.Row, error) {
	return retry(s, ctx, "Row", func() (store.Row, error) { return s.rowOnce(ctx, partition, table, rowID) })
}

// rowOnce is Row, once (see "Lost connections", retry.go).
func (s *Store) rowOnce(ctx context.Context, partition, table, rowID string) (store.Row, error) {
	ts, err := s.table(table)
	if err != nil {
		return store.Row{}, err
	}
	row, err := scanRow(s.pool.QueryRow(ctx, ts.selectRow, partition, rowID), table)
	if err != nil {
		return store.Row{}, fmt.Errorf("row: %w", err)
	}
	return row, nil
}

// PushResult reads the push-result journal.
func (s *Store) PushResult(ctx context.Context, partition, clientID, clientCommitID string) (store.PushRecord, error) {
	return retry(s, ctx, "PushResult", func() (store.PushRecord, error) { return s.pushResultOnce(ctx, partition, clientID, clientCommitID) })
}

// pushResultOnce is PushResult, once (see "Lost connections", retry.go).
func (s *Store) pushResultOnce(ctx context.Context, partition, clientID, clientCommitID string) (store.PushRecord, error) {
	if err := s.check(); err != nil {
		return store.PushRecord{}, err
	}
	rec, err := scanPushRecord(s.pool.QueryRow(ctx, sqlPushResult, partition, clientID, clientCommitID))
	if err != nil {
		return store.PushRecord{}, fmt.Errorf("push result: %w", err)
	}
	return rec, nil
}

// ScanRows reads one page of the current rows of a table inside the
// effective scopes, in bytewise row-id order, in one statement (see
// scanSQL): every row of the page matches every key, so a short page is
// the last one.
func (s *Store) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	return retry(s, ctx, "ScanRows", func() ([]store.Row, error) { return s.scanRowsOnce(ctx, partition, q) })
}

// scanRowsOnce is ScanRows, once (see "Lost connections", retry.go).
func (s *Store) scanRowsOnce(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	ts, err := s.table(q.Table)
	if err != nil {
		return nil, err
	}
	if len(q.Scopes) == 0 {
		return nil, scanRequiresScope()
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("scan rows: limit %d is not positive", q.Limit)
	}
	first, rest, ok := splitScopes(q.Scopes)
	if !ok {
		return nil, nil // a key without values matches nothing
	}
	sql, args := ts.scanFirst, []any{partition, ts.name, first.Values, first.Key, rest, q.Limit}
	if q.After != nil {
		sql, args = ts.scanAfter, append(args, *q.After)
	}
	switch {
	case len(q.Scopes) == 1 && len(first.Values) == 1:
		sql = ts.scanFirstValue
		if q.After != nil {
			sql = ts.scanAfterValue
		}
	case len(q.Scopes) == 1:
		sql = ts.scanFirstOne
		if q.After != nil {
			sql = ts.scanAfterOne
		}
	}
	if ts.ordered && len(q.Scopes) == 1 && len(first.Values) == 1 {
		scopes := 1
		if q.NoScopes {
			scopes = 0
		}
		dense := ts.scanDenseFirst[scopes]
		if q.After != nil {
			dense = ts.scanDenseAfter[scopes]
		}
		rows, err := s.pool.Query(ctx, dense, args...)
		if err != nil {
			return nil, fmt.Errorf("scan rows: %w", err)
		}
		out, ok, err := collectDenseRows(rows, q.Table, q.Limit, q.NoScopes)
		if err != nil {
			return nil, fmt.Errorf("scan rows: %w", err)
		}
		if ok {
			return out, nil
		}
		// A row past the window: the value is sparse here.
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("scan rows: %w", err)
	}
	// With one key (rest is empty) every row comes from the index entry
	// of one of its values: a caller that does not read the scopes
	// (NoScopes) gets them undecoded.
	out, err := collectScanRows(rows, q.Table, q.Limit, q.NoScopes && len(q.Scopes) == 1)
	if err != nil {
		return nil, fmt.Errorf("scan rows: %w", err)
	}
	return out, nil
}

// ListRows reads a page of a table's current rows in bytewise row-id
// order, whatever their scopes.
func (s *Store) ListRows(ctx context.Context, partition, table string, after *string, limit int) ([]store.Row, error) {
	return retry(s, ctx, "ListRows", func() ([]store.Row, error) { return s.listRowsOnce(ctx, partition, table, after, limit) })
}

// listRowsOnce is ListRows, once (see "Lost connections", retry.go).
func (s *Store) listRowsOnce(ctx context.Context, partition, table string, after *string, limit int) ([]store.Row, error) {
	ts, err := s.table(table)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("list rows: limit %d is not positive", limit)
	}
	sql, args := ts.listFirst, []any{partition, limit}
	if after != nil {
		sql, args = ts.listAfter, append(args, *after)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list rows: %w", err)
	}
	out, err := collectRows(rows, table)
	if err != nil {
		return nil, fmt.Errorf("list rows: %w", err)
	}
	return out, nil
}

// LatestScopedChangeSeq returns the newest commit sequence whose change to
// table carries one of the scope's values, or 0, from the change scope
// index alone.
func (s *Store) LatestScopedChangeSeq(ctx context.Context, partition, table string, scope wire.ScopeValues) (int64, error) {
	return retry(s, ctx, "LatestScopedChangeSeq", func() (int64, error) { return s.latestScopedChangeSeqOnce(ctx, partition, table, scope) })
}

// latestScopedChangeSeqOnce is LatestScopedChangeSeq, once (see "Lost connections", retry.go).
func (s *Store) latestScopedChangeSeqOnce(ctx context.Context, partition, table string, scope wire.ScopeValues) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var seq int64
	err := s.pool.QueryRow(ctx, sqlLatestScopedChangeSeq, partition, table, scope.Key, scope.Values).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("latest scoped change seq: %w", err)
	}
	return seq, nil
}

// collectRows reads the rows of a listing.
func collectRows(rows pgx.Rows, table string) ([]store.Row, error) {
	defer rows.Close()
	var out []store.Row // grows with the rows found: an empty listing allocates nothing
	for rows.Next() {
		r, err := scanRow(rows, table)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// collectScanRows reads the rows of a page scan (rowColumns), returned in
// bytewise row-id order: a page that does not arrive in that order (the
// single-value scans leave the final ORDER BY out) is sorted. The rows
// are collected by a rowbuf.Buffer; with the byte columns in binary
// format (pgx's extended protocol) the payloads are copied from the
// received message into its blocks rather than allocated one by one.
// With noScopes Row.Scopes is left nil and the scopes are not read.
func collectScanRows(rows pgx.Rows, table string, limit int, noScopes bool) ([]store.Row, error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	raw := len(fds) == 5 && fds[3].Format == pgx.BinaryFormatCode && fds[4].Format == pgx.BinaryFormatCode
	var (
		rb      = rowbuf.Buffer{Limit: limit}
		ordered = true
		prev    string
	)
	// The destinations are the same for every row (a fresh set per row
	// would move each row's variables to the heap).
	var (
		rowID         string
		version       int64
		scopes        []byte
		payload, cols []byte
		scopesDst     any // nil: the column is skipped
	)
	if !noScopes {
		scopesDst = &scopes
	}
	dst := []any{&rowID, &version, scopesDst, nil, nil}
	if !raw {
		dst[3], dst[4] = &payload, &cols
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		r := store.Row{Table: table, RowID: rowID, ServerVersion: version, Payload: payload, ColumnVersions: cols}
		if raw {
			vals := rows.RawValues()
			r.Payload, r.ColumnVersions = rb.Copy(vals[3]), rb.Copy(vals[4])
		}
		var err error
		if !noScopes {
			if r.Scopes, err = decodeScopes(scopes); err != nil {
				return nil, err
			}
		}
		if len(r.ColumnVersions) == 0 {
			r.ColumnVersions = nil
		}
		if rb.Len() > 0 && r.RowID < prev {
			ordered = false
		}
		prev = r.RowID
		rb.Add(r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := rb.Rows()
	if !ordered {
		slices.SortFunc(out, func(a, b store.Row) int { return strings.Compare(a.RowID, b.RowID) })
	}
	return out, nil
}

// collectDenseRows reads a dense scan (scanDenseSQL): the page's entries
// (row ids with server_version -1), then the window of the table's rows,
// and walks the two side by side (both in bytewise row-id order; sorted
// here if either did not arrive so). It reports false when an entry's row
// is not in the window (the value is sparse there, or a row id of the
// index has no row): the caller reads the page by the probing scan. The
// window's rows outside the value are dropped. With noScopes Row.Scopes is
// left nil.
func collectDenseRows(rows pgx.Rows, table string, limit int, noScopes bool) ([]store.Row, bool, error) {
	defer rows.Close()
	fds := rows.FieldDescriptions()
	raw := len(fds) == 5 && fds[3].Format == pgx.BinaryFormatCode && fds[4].Format == pgx.BinaryFormatCode
	var (
		ids     rowbuf.Arena // the row ids of the entries and of the window
		rb      = rowbuf.Buffer{Limit: limit + denseSlack}
		entries []string
		version int64
		scopes  []byte
		payload []byte
		cols    []byte
	)
	var scopesDst any
	if !noScopes {
		scopesDst = &scopes
	}
	dst := []any{nil, &version, scopesDst, nil, nil}
	if !raw {
		dst[3], dst[4] = &payload, &cols
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, false, err
		}
		vals := rows.RawValues()
		id := ids.String(vals[0])
		if version < 0 {
			entries = rowbuf.Append(entries, limit, id)
			continue
		}
		r := store.Row{Table: table, RowID: id, ServerVersion: version, Payload: payload, ColumnVersions: cols}
		if raw {
			r.Payload, r.ColumnVersions = rb.Copy(vals[3]), rb.Copy(vals[4])
		}
		if !noScopes {
			var err error
			if r.Scopes, err = decodeScopes(scopes); err != nil {
				return nil, false, err
			}
		}
		if len(r.ColumnVersions) == 0 {
			r.ColumnVersions = nil
		}
		rb.Add(r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	w := rb.Rows()
	if !slices.IsSorted(entries) {
		slices.Sort(entries)
	}
	if !slices.IsSortedFunc(w, func(a, b store.Row) int { return strings.Compare(a.RowID, b.RowID) }) {
		slices.SortFunc(w, func(a, b store.Row) int { return strings.Compare(a.RowID, b.RowID) })
	}
	// Each entry takes its row from the window, in place: the k-th kept
	// row is never after the j-th window row.
	k, j := 0, 0
	for _, e := range entries {
		for j < len(w) && w[j].RowID < e {
			j++
		}
		if j == len(w) || w[j].RowID != e {
			return nil, false, nil
		}
		w[k] = w[j]
		k, j = k+1, j+1
	}
	clear(w[k:])
	return w[:k], true, nil
}

// splitScopes returns the first effective key with its values
// deduplicated, and the other keys as the JSONB filter of the scans. It
// reports false when some key has no values: nothing can match.
func splitScopes(m wire.ScopeMap) (first wire.ScopeValues, rest []byte, ok bool) {
	others := make(map[string][]string, len(m)-1)
	for i, e := range m {
		if len(e.Values) == 0 {
			return first, nil, false
		}
		if i == 0 {
			vals := slices.Clone(e.Values)
			slices.Sort(vals)
			first = wire.ScopeValues{Key: e.Key, Values: slices.Compact(vals)}
			continue
		}
		others[e.Key] = e.Values
	}
	rest, _ = json.Marshal(others) // a map of string slices always marshals
	return first, rest, true
}

// scanRequiresScope is the error of a scan without scopes.
func scanRequiresScope() error {
	return &store.Error{
		Code:    store.CodeScanRequiresScope,
		Message: "a scan needs at least one scope key",
		Err:     store.ErrScanRequiresScope,
	}
}

// scanRow reads the columns rowColumns lists; no row is store.ErrNotFound.
func scanRow(r pgx.Row, table string) (store.Row, error) {
	var (
		row    = store.Row{Table: table}
		scopes []byte
	)
	if err := r.Scan(&row.RowID, &row.ServerVersion, &scopes, &row.Payload, &row.ColumnVersions); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Row{}, store.ErrNotFound
		}
		return store.Row{}, err
	}
	var err error
	if row.Scopes, err = decodeScopes(scopes); err != nil {
		return store.Row{}, err
	}
	if len(row.ColumnVersions) == 0 {
		row.ColumnVersions = nil
	}
	return row, nil
}

// scanPushRecord reads and decodes a journal record; no row is
// store.ErrNotFound, a record that does not decode store.ErrUnreadable.
func scanPushRecord(r pgx.Row) (store.PushRecord, error) {
	var body []byte
	if err := r.Scan(&body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.PushRecord{}, store.ErrNotFound
		}
		return store.PushRecord{}, err
	}
	return decodePushRecord(body)
}
