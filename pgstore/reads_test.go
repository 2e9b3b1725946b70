package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestReadCommitWindow(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	w := func(id, project, owner string) store.RowWrite {
		return task{id: id, project: project, owner: owner}.write(t, c, 1)
	}
	apply(t, s, "p", w("a", "p1", "o1"), w("b", "p1", "o2"))                     // 1: 2 changes, 1 for o1
	apply(t, s, "p", w("c", "p2", "o1"))                                         // 2: other project
	apply(t, s, "p", w("d", "p1", "o1"), w("e", "p1", "o1"), w("f", "p1", "o1")) // 3: 3 changes
	apply(t, s, "p", w("g", "p1", "o1"))                                         // 4
	apply(t, s, "other", w("h", "p1", "o1"))                                     // other partition
	read := func(q store.CommitWindowQuery) store.CommitWindow {
		t.Helper()
		q.Table = "tasks"
		got, err := s.ReadCommitWindow(ctx, "p", q)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	shape := func(w store.CommitWindow) string {
		var parts []string
		for _, c := range w.Commits {
			var ids []string
			for _, ch := range c.Changes {
				ids = append(ids, ch.RowID)
			}
			parts = append(parts, fmt.Sprintf("%d:%s", c.Seq, strings.Join(ids, "")))
		}
		return fmt.Sprintf("%s complete=%t", strings.Join(parts, " "), w.Complete)
	}
	both := wire.ScopeMap{{Key: "owner_id", Values: []string{"o1"}}, {Key: "project_id", Values: []string{"p1"}}}
	for _, tc := range []struct {
		q    store.CommitWindowQuery
		want string
	}{
		{store.CommitWindowQuery{Scopes: scope("project_id", "p1"), ThroughSeq: 4}, "1:ab 3:def 4:g complete=true"},
		{store.CommitWindowQuery{Scopes: scope("project_id", "p1", "p2", "p1"), ThroughSeq: 4}, "1:ab 2:c 3:def 4:g complete=true"},
		{store.CommitWindowQuery{Scopes: both, ThroughSeq: 4}, "1:a 3:def 4:g complete=true"},
		{store.CommitWindowQuery{Scopes: both, AfterSeq: 1, ThroughSeq: 3}, "3:def complete=true"},
		{store.CommitWindowQuery{Scopes: both, ThroughSeq: 4, LimitChanges: 2}, "1:a complete=false"},
		{store.CommitWindowQuery{Scopes: both, ThroughSeq: 4, LimitChanges: 4}, "1:a 3:def complete=false"},
		{store.CommitWindowQuery{Scopes: both, ThroughSeq: 4, LimitChanges: 5}, "1:a 3:def 4:g complete=true"},
		{store.CommitWindowQuery{Scopes: both, AfterSeq: 2, ThroughSeq: 4, LimitChanges: 1}, "3:def complete=false"},
		{store.CommitWindowQuery{Scopes: scope("project_id", "nope"), ThroughSeq: 4}, " complete=true"},
		{store.CommitWindowQuery{Scopes: scope("project_id"), ThroughSeq: 4}, " complete=true"},
	} {
		if got := shape(read(tc.q)); got != tc.want {
			t.Errorf("%+v: got %q; want %q", tc.q, got, tc.want)
		}
	}
	got := read(store.CommitWindowQuery{Scopes: both, AfterSeq: 3, ThroughSeq: 4})
	want := store.Commit{Seq: 4, CreatedAtMs: 1000, ActorID: "a1", ClientID: "c1"}
	if len(got.Commits) != 1 || got.Commits[0].ActorID != want.ActorID || got.Commits[0].CreatedAtMs != want.CreatedAtMs {
		t.Fatalf("commit = %+v", got.Commits)
	}
	ch := got.Commits[0].Changes[0]
	wg := w("g", "p1", "o1")
	if ch.Table != "tasks" || ch.Op != wire.OpUpsert || ch.RowVersion != 1 || !slices.Equal(ch.Payload, wg.Payload) ||
		!slices.Equal(ch.Scopes, wg.Scopes) {
		t.Errorf("change = %+v; want %+v", ch, upsertChange(wg))
	}
	if _, err := s.ReadCommitWindow(ctx, "p", store.CommitWindowQuery{Table: "tasks", ThroughSeq: 4}); !errors.Is(err, store.ErrScanRequiresScope) ||
		store.ErrorCode(err) != store.CodeScanRequiresScope {
		t.Errorf("window without scopes = %v", err)
	}
}

// TestCommitWindowPages reads a window that takes several candidate pages.
func TestCommitWindowPages(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	n := defaultWindowPageCommits + 10
	var changes []store.Change
	for i := range n {
		changes = append(changes, upsertChange(task{id: fmt.Sprint(i), project: "p1", owner: fmt.Sprint(i % 2)}.write(t, c, 1)))
	}
	err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		for i, ch := range changes {
			if _, err := tx.AppendCommit(ctx, commitOf(fmt.Sprint(i), ch)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	q := store.CommitWindowQuery{Table: "tasks", Scopes: wire.ScopeMap{{Key: "owner_id", Values: []string{"1"}},
		{Key: "project_id", Values: []string{"p1"}}}, ThroughSeq: int64(n)}
	w, err := s.ReadCommitWindow(context.Background(), "p", q)
	if err != nil || !w.Complete || len(w.Commits) != n/2 {
		t.Fatalf("window: %d commits, complete %t, %v", len(w.Commits), w.Complete, err)
	}
	q.LimitChanges = 100
	if w, err = s.ReadCommitWindow(context.Background(), "p", q); err != nil || w.Complete || len(w.Commits) != 100 {
		t.Fatalf("limited window: %d commits, complete %t, %v", len(w.Commits), w.Complete, err)
	}
}

func TestScanRowsBytewiseAndFiltered(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	// Whatever the database collation, the order is bytewise, also when
	// the scope index column was created with a linguistic collation (as a
	// database created by the reference server may have it).
	if _, err := s.pool.Exec(ctx, `ALTER TABLE sync_row_scopes ALTER COLUMN row_id TYPE TEXT COLLATE "und-x-icu"`); err != nil {
		t.Logf("no ICU collation to test with: %v", err)
	}
	ids := []string{"b", "B", "a", "é", "Z", "ä", "a1", "A", "10", "9", "_"}
	var ws []store.RowWrite
	for i, id := range ids {
		ws = append(ws, task{id: id, project: "p1", owner: fmt.Sprint("o", i%2)}.write(t, c, 1))
	}
	ws = append(ws, task{id: "x", project: "p2", owner: "o0"}.write(t, c, 1))
	apply(t, s, "p", ws...)
	scan := func(scopes wire.ScopeMap, limit int) []string {
		var out []string
		q := store.RowScanQuery{Table: "tasks", Scopes: scopes, Limit: limit}
		for {
			page, err := s.ScanRows(ctx, "p", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page {
				out = append(out, r.RowID)
			}
			if len(page) < limit {
				return out
			}
			q.After = &page[len(page)-1].RowID
		}
	}
	want := slices.Clone(ids)
	slices.Sort(want) // Go compares strings bytewise
	for _, limit := range []int{1, 3, 100} {
		if got := scan(scope("project_id", "p1"), limit); !slices.Equal(got, want) {
			t.Errorf("limit %d: %q; want %q", limit, got, want)
		}
	}
	var evens []string
	for i, id := range ids {
		if i%2 == 0 {
			evens = append(evens, id)
		}
	}
	slices.Sort(evens)
	both := wire.ScopeMap{{Key: "owner_id", Values: []string{"o0"}}, {Key: "project_id", Values: []string{"p1"}}}
	if got := scan(both, 2); !slices.Equal(got, evens) {
		t.Errorf("two keys: %q; want %q", got, evens)
	}
	if got := scan(scope("owner_id", "o0", "o1"), 4); len(got) != len(ids)+1 {
		t.Errorf("two values: %q", got)
	}
	r, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "p2"), Limit: 1})
	if err != nil || len(r) != 1 || !slices.Equal(r[0].Payload, ws[len(ws)-1].Payload) || !slices.Equal(r[0].Scopes, ws[len(ws)-1].Scopes) {
		t.Errorf("scan p2 = %+v, %v", r, err)
	}
	if _, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Limit: 1}); !errors.Is(err, store.ErrScanRequiresScope) {
		t.Errorf("scan without scopes = %v", err)
	}
	if _, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "p1")}); err == nil {
		t.Error("scan with limit 0 succeeded")
	}
}

func TestPushResults(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	ctx := context.Background()
	first := store.PushRecord{Status: wire.PushApplied, CommitSeq: 7, RecordedAtMs: 5, CacheIdentity: "id",
		Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}}
	second := store.PushRecord{Status: wire.PushRejected, Results: []wire.OpResult{}}
	var stored []bool
	for _, rec := range []store.PushRecord{first, second} {
		err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			ok, err := tx.PutPushResult(ctx, "c", "k", rec)
			stored = append(stored, ok)
			got, rerr := tx.PushResult(ctx, "c", "k")
			if rerr != nil || got.CommitSeq != 7 {
				t.Errorf("tx.PushResult = %+v, %v", got, rerr)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(stored, []bool{true, false}) {
		t.Errorf("stored = %v; want first writer wins", stored)
	}
	got, err := s.PushResult(ctx, "p", "c", "k")
	if err != nil || got.Status != wire.PushApplied || got.CommitSeq != 7 || got.CacheIdentity != "id" || len(got.Results) != 1 {
		t.Errorf("PushResult = %+v, %v", got, err)
	}
	if _, err := s.PushResult(ctx, "p", "c", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown commit id: %v", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO sync_push_results VALUES ('p', 'c', 'bad', '{"status":"weird"}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PushResult(ctx, "p", "c", "bad"); !errors.Is(err, store.ErrUnreadable) {
		t.Errorf("unreadable record: %v", err)
	}
}

// TestScopeReadsUseIndexes checks the plans of the scoped reads and of the
// row scope index's upkeep: the candidates of a read come from the primary
// keys of the scope indexes (never from sync_row_scopes_by_row, whose
// row_id order would come with a filter on the scope value), and an
// upsert's or delete's cleanup of a row's entries from
// sync_row_scopes_by_row (not a scan of the table's entries); a batch's
// reads ahead probe primary keys.
func TestScopeReadsUseIndexes(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ts, _ := s.table("tasks")
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET enable_seqscan")
	explain := func(sql string, args ...any) string {
		t.Helper()
		rows, err := conn.Query(ctx, "EXPLAIN (FORMAT TEXT) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, line)
		}
		return strings.Join(lines, "\n")
	}
	// A new table's primary key is in bytewise row-id order
	// (order_index.go): the scans join the table by it, under "C".
	if !ts.ordered {
		t.Fatal("the scans of a new table do not join by its bytewise key")
	}
	tableIndex := "tasks_pkey"
	// The app table with statistics: on an empty table every index of the
	// partition costs the same for a probe.
	for i := range 50 {
		apply(t, s, "p", task{id: fmt.Sprintf("r%d", i), project: "a", owner: "o", rank: ptr(int64(i % 3))}.write(t, c, 1))
	}
	if _, err := conn.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	// The dense scan of one value: the value's entries and the table's
	// key, each a range in order; the probing scans never merge-join
	// (a sparse value would read the partition's key between its rows).
	// The two ranges are returned one after the other, not joined (a
	// merge join sorted the entries again and materialized the window).
	for _, sql := range []string{ts.scanDenseFirst[0], ts.scanDenseAfter[0], ts.scanDenseFirst[1], ts.scanDenseAfter[1]} {
		args := []any{"p", "tasks", []string{"a"}, "project_id", []byte(`{}`), 100}
		if strings.Contains(sql, "$7") {
			args = append(args, "x")
		}
		if plan := explain(sql, args...); !strings.Contains(plan, "Index Only Scan using sync_row_scopes_pkey") ||
			!strings.Contains(plan, "Index Scan using tasks_pkey") || strings.Contains(plan, "sync_row_scopes_by_row") ||
			strings.Contains(plan, "Join") || strings.Contains(plan, "Sort") {
			t.Errorf("the dense scan does not read the two keys as two ranges:\n%s", plan)
		}
	}
	for _, sql := range []string{ts.scanAfterValue, ts.scanAfterOne, ts.scanAfter} {
		if plan := explain(sql, "p", "tasks", []string{"a", "b"}, "project_id", []byte(`{"owner_id":["o"]}`), 100, "x"); strings.Contains(plan, "Merge Join") {
			t.Errorf("a probing scan merge-joins:\n%s", plan)
		}
	}
	vals := []string{"a", "b"}
	if plan := explain(sqlCommitWindow, "p", "tasks", "project_id", vals, int64(0), int64(10), 100); !strings.Contains(plan, "Index Only Scan using sync_change_scopes_pkey") {
		t.Errorf("the window does not read the change scope index:\n%s", plan)
	}
	if plan := explain(ts.scanAfter, "p", "tasks", vals, "project_id", []byte(`{"owner_id":["o"]}`), 100, "x"); !strings.Contains(plan, "Index Only Scan using sync_row_scopes_pkey") ||
		!strings.Contains(plan, "Index Scan using "+tableIndex) || strings.Contains(plan, "Sort Key: s.row_id") {
		t.Errorf("the scan does not read the row scope index in order:\n%s", plan)
	}
	if plan := explain(ts.scanAfterOne, "p", "tasks", vals, "project_id", []byte(`{}`), 100, "x"); !strings.Contains(plan, "Index Only Scan using sync_row_scopes_pkey") ||
		!strings.Contains(plan, "Index Scan using "+tableIndex) || strings.Contains(plan, "Sort Key: s.row_id") || strings.Contains(plan, "jsonb_each") {
		t.Errorf("the single-key scan does not read the row scope index in order, or checks other keys per row:\n%s", plan)
	}
	// One value of one key: its range of the row scope index in order,
	// with no sort of the page after it (nor a parallel plan, whose
	// workers cost a 10,000-row page more than they save).
	for _, sql := range []string{ts.scanFirstValue, ts.scanAfterValue} {
		args := []any{"p", "tasks", []string{"a"}, "project_id", []byte(`{}`), 100}
		if sql == ts.scanAfterValue {
			args = append(args, "x")
		}
		if plan := explain(sql, args...); !strings.Contains(plan, "Index Only Scan using sync_row_scopes_pkey") ||
			!strings.Contains(plan, "Index Scan using "+tableIndex) || strings.Contains(plan, "Sort") || strings.Contains(plan, "Gather") {
			t.Errorf("the single-value scan does not read the row scope index in order without a sort:\n%s", plan)
		}
	}
	// The page boundary walk: the row scope key alone, in order per value
	// (the table is not read): each value's range is limited straight off
	// the index, only the merge of the values sorts.
	if plan := explain(sqlWalkIDs, "p", "tasks", "project_id", vals, "", int64(101)); !regexp.MustCompile(`Limit[^\n]*\n\s*->  Index Only Scan using sync_row_scopes_pkey`).MatchString(plan) ||
		strings.Contains(plan, "tasks_pkey") || strings.Contains(plan, "sync_row_scopes_by_row") {
		t.Errorf("the page boundary walk does not read the row scope key alone, in order:\n%s", plan)
	}
	// The walk of one value: its range of the row scope key in the key's
	// order, with no sort of the entries.
	if plan := explain(sqlWalkIDsOne, "p", "tasks", "project_id", "a", "", int64(101)); !strings.Contains(plan, "Index Only Scan using sync_row_scopes_pkey") ||
		strings.Contains(plan, "Sort Key: s.row_id") || strings.Contains(plan, " on tasks") || strings.Contains(plan, "sync_row_scopes_by_row") {
		t.Errorf("the single-value boundary walk does not read the row scope key's range in order:\n%s", plan)
	}
	for _, after := range []bool{false, true} {
		sql, args := ts.scanFirst, []any{"p", "tasks", vals, "project_id", []byte(`{"owner_id":["o"]}`), 100}
		if after {
			sql, args = ts.scanAfter, append(args, "x")
		}
		if plan := explain(sql, args...); strings.Contains(plan, "sync_row_scopes_by_row") {
			t.Errorf("the scan (after %v) reads sync_row_scopes_by_row:\n%s", after, plan)
		}
	}
	// The reads ahead of a batch: a primary-key probe per key.
	for name, q := range map[string]struct {
		plan, index, key string
	}{
		"push results": {explain(sqlPushResults, "p", []string{"c"}, []string{"k"}), "sync_push_results_pkey", "client_commit_id"},
		"tombstones":   {explain(sqlTombstones, "p", []string{"tasks"}, []string{"r1"}), "sync_tombstones_pkey", "row_id"},
		"rows":         {explain(ts.selectRows, "p", []string{"r1"}), "tasks_pkey", "_sync_row_id"},
	} {
		probe := false
		for _, line := range strings.Split(q.plan, "\n") {
			probe = probe || strings.Contains(line, "Index Cond:") && strings.Contains(line, q.key)
		}
		if !strings.Contains(q.plan, q.index) || !probe {
			t.Errorf("the read ahead of %s is not a probe of %s on %s:\n%s", name, q.index, q.key, q.plan)
		}
	}
	upsert := []any{"p", "r1"}
	for range ts.typed {
		upsert = append(upsert, nil)
	}
	upsert = append(upsert, int64(1), `{}`, []byte{}, nil, "tasks", []string{"project_id", "owner_id"}, vals)
	upserts := []any{"p", "tasks", []string{"r1", "r2"}}
	for _, col := range ts.typed {
		upserts = append(upserts, typedArray(col.Type, []any{nil, nil}))
	}
	upserts = append(upserts, []int64{1, 1}, []string{`{}`, `{}`}, [][]byte{{}, {}}, [][]byte{nil, nil},
		[]string{"r1", "r2"}, []string{"project_id", "project_id"}, []string{"a", "b"})
	for name, plan := range map[string]string{
		"upsert":            explain(ts.writeRow, upsert...),
		"coalesced upserts": explain(ts.writeRows, upserts...),
		"delete":            explain(ts.dropRow, "p", "r1", "tasks"),
	} {
		// The row id in the index condition, not in a filter of the
		// partition's and table's entries.
		byRow := false
		for _, line := range strings.Split(plan, "\n") {
			byRow = byRow || strings.Contains(line, "Index Cond:") && strings.Contains(line, "row_id")
		}
		if !strings.Contains(plan, "using sync_row_scopes_by_row") || !byRow {
			t.Errorf("the %s of a row's scope entries does not read sync_row_scopes_by_row:\n%s", name, plan)
		}
	}
}

// collectScanRows returns a page in bytewise row-id order whatever order
// the rows arrive in (the single-value scans have no final ORDER BY), with
// the payloads copied out of the received messages, and the scopes
// decoded unless noScopes.
func TestCollectScanRowsOrders(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	const q = `SELECT v.id, v.n::bigint, '{"project_id":"a"}'::jsonb, convert_to(v.id, 'UTF8'), NULL::bytea
  FROM (VALUES ('b', 1, 1), ('a', 2, 2), ('c', 3, 3), ('B', 4, 4)) AS v(id, n, o) ORDER BY v.o`
	for _, noScopes := range []bool{true, false} {
		rows, err := s.pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := collectScanRows(rows, "tasks", 10, noScopes)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.RowID)
			if string(r.Payload) != r.RowID || r.ColumnVersions != nil || r.Table != "tasks" {
				t.Errorf("row %s: payload %q, column versions %v, table %q", r.RowID, r.Payload, r.ColumnVersions, r.Table)
			}
			if (r.Scopes == nil) != noScopes {
				t.Errorf("row %s with noScopes %v: scopes %v", r.RowID, noScopes, r.Scopes)
			}
		}
		if want := []string{"B", "a", "b", "c"}; !slices.Equal(ids, want) {
			t.Errorf("noScopes %v: rows %v, want %v", noScopes, ids, want)
		}
	}
}

// TestCollectDenseRows: the reader of a dense scan takes each entry's row
// from the window, drops the window's rows outside the entries, sorts
// either range that did not arrive in bytewise order, and gives up
// (false) when an entry has no row in the window.
func TestCollectDenseRows(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	// entries: row ids with version -1; window: (id, version) rows.
	query := func(entries []string, window []string) string {
		var parts []string
		for i, id := range entries {
			parts = append(parts, fmt.Sprintf(`('%s', -1, %d)`, id, i))
		}
		for i, id := range window {
			parts = append(parts, fmt.Sprintf(`('%s', %d, %d)`, id, 10+i, 1000+i))
		}
		return `SELECT v.id, v.n::bigint, '{"project_id":"a"}'::jsonb, CASE WHEN v.n < 0 THEN NULL ELSE convert_to(v.id, 'UTF8') END, NULL::bytea
  FROM (VALUES ` + strings.Join(parts, ", ") + `) AS v(id, n, o) ORDER BY v.o`
	}
	for _, c := range []struct {
		name            string
		entries, window []string
		want            []string // nil: gives up
	}{
		{"dense", []string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"window rows outside the value dropped", []string{"b", "d"}, []string{"a", "b", "c", "d", "e"}, []string{"b", "d"}},
		{"bytewise, out of order", []string{"b", "B", "a"}, []string{"a", "b", "x", "B"}, []string{"B", "a", "b"}},
		{"an entry past the window", []string{"a", "b", "z"}, []string{"a", "b", "c"}, nil},
		{"an entry without a row", []string{"a", "bb", "c"}, []string{"a", "b", "c"}, nil},
		{"an entry before the window", []string{"0", "a"}, []string{"a", "b"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, noScopes := range []bool{true, false} {
				rows, err := s.pool.Query(ctx, query(c.entries, c.window))
				if err != nil {
					t.Fatal(err)
				}
				got, ok, err := collectDenseRows(rows, "tasks", 10, noScopes)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (c.want != nil) {
					t.Fatalf("noScopes %v: complete %v, want %v (rows %v)", noScopes, ok, c.want != nil, got)
				}
				var ids []string
				for _, r := range got {
					ids = append(ids, r.RowID)
					if string(r.Payload) != r.RowID || r.ServerVersion < 10 || r.ColumnVersions != nil || r.Table != "tasks" {
						t.Errorf("row %s: payload %q, version %d, column versions %v, table %q", r.RowID, r.Payload, r.ServerVersion, r.ColumnVersions, r.Table)
					}
					if (r.Scopes == nil) != noScopes {
						t.Errorf("row %s with noScopes %v: scopes %v", r.RowID, noScopes, r.Scopes)
					}
				}
				if c.want != nil && !slices.Equal(ids, c.want) {
					t.Errorf("noScopes %v: rows %v, want %v", noScopes, ids, c.want)
				}
			}
		})
	}
}
