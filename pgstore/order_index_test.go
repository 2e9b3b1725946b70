package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncgo/syncgo/store"
)

// TestOrderIndex: a new table's primary key is in bytewise row-id order
// and the scans join by it; a database whose table has it in the database
// collation (created before, or by the reference server) is opened without
// any DDL and scanned by the primary key join, with the same rows; the
// order index an operator builds is taken at the next EnsureSchema, an
// index of the name but another key is not.
func TestOrderIndex(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ctx := context.Background()
	c1 := testSchema(t, 1)
	ensure(t, s, c1)
	if ts, _ := s.table("tasks"); !ts.ordered || ts.scanDenseAfter[0] == "" || strings.Contains(ts.scanAfterValue, `COLLATE "default"`) {
		t.Fatalf("a new table is not scanned by its bytewise key (ordered %v)", ts.ordered)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_index WHERE indrelid = 'tasks'::regclass`); n != 3 {
		t.Errorf("a new table has %d indexes, want its primary key and its two declared ones", n)
	}
	var ws []store.RowWrite
	for i := range 40 {
		// Ids whose bytewise order differs from a linguistic one.
		ws = append(ws, task{id: fmt.Sprintf("%c-%02d", []rune("aB_é")[i%4], i), project: "p1", owner: "o"}.write(t, c1, 1))
	}
	apply(t, s, "p", ws...)
	scanAll := func(s *Store) []string {
		t.Helper()
		var ids []string
		var after *string
		for {
			rows, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "p1"), After: after, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				ids = append(ids, r.RowID)
			}
			if len(rows) < 7 {
				return ids
			}
			after = &rows[len(rows)-1].RowID
		}
	}
	want := scanAll(s)
	if len(want) != 40 || !slices.IsSorted(want) {
		t.Fatalf("ordered scan: %d rows, sorted %v: %q", len(want), slices.IsSorted(want), want)
	}
	// The bootstrap pages' read (the table walk) in pages of 7 and 40.
	visitAll := func(s *Store, limit int) []string {
		t.Helper()
		var ids []string
		var after *string
		for {
			n := 0
			err := s.VisitRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "p1"), After: after, Limit: limit, NoScopes: true},
				func(r *store.Row) bool { ids = append(ids, strings.Clone(r.RowID)); n++; return true })
			if err != nil {
				t.Fatal(err)
			}
			if n < limit {
				return ids
			}
			after = &ids[len(ids)-1]
		}
	}
	for _, limit := range []int{7, 40} {
		if got := visitAll(s, limit); !slices.Equal(got, want) {
			t.Errorf("visited by the table walk (pages of %d) %q, want %q", limit, got, want)
		}
	}
	boundaries := func(s *Store) []string {
		t.Helper()
		got, err := s.PageBoundaries(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "p1"), Limit: 7}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	wantB := []string{want[6], want[13], want[20], want[27], want[34]}
	if got := boundaries(s); !slices.Equal(got, wantB) {
		t.Errorf("boundaries %q, want %q", got, wantB)
	}
	if r, err := s.Row(ctx, "p", "tasks", want[3]); err != nil || r.RowID != want[3] {
		t.Errorf("Row(%q) = %q, %v", want[3], r.RowID, err)
	}
	// A sparse value: its rows far apart among the partition's, past the
	// dense scan's window: the probing scan reads them, in order.
	var sparse, spread []store.RowWrite
	for i := range 300 {
		project := "wide"
		if i%100 == 7 {
			project = "few"
		}
		sparse = append(sparse, task{id: fmt.Sprintf("s-%03d", i), project: project, owner: "o"}.write(t, c1, 1))
	}
	apply(t, s, "p", append(spread, sparse...)...)
	for _, after := range []*string{nil, ptr("s-100")} {
		rows, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: scope("project_id", "few"), After: after, Limit: 2})
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.RowID)
			if r.ServerVersion != 1 || len(r.Payload) == 0 || len(r.Scopes) == 0 {
				t.Errorf("sparse row %+v", r)
			}
		}
		want := []string{"s-007", "s-107"}
		if after != nil {
			want = []string{"s-107", "s-207"}
		}
		if err != nil || !slices.Equal(ids, want) {
			t.Errorf("sparse scan after %v = %q, %v; want %q", after, ids, err, want)
		}
	}

	// A table from before: its key in the database collation. Opened at
	// the same version: no DDL, the primary key join, the same rows.
	admin(t, testURL(t), "ALTER TABLE "+name+`.tasks ALTER COLUMN _sync_row_id TYPE text COLLATE "default"`)
	old := openIn(t, name, Config{})
	ensure(t, old, c1)
	if ts, _ := old.table("tasks"); ts.ordered || ts.scanDenseAfter[0] != "" {
		t.Fatal("a table keyed in the database collation is scanned as ordered")
	}
	if n := queryInt(t, old, `SELECT count(*) FROM pg_index WHERE indrelid = 'tasks'::regclass`); n != 3 {
		t.Fatalf("opening at the running version changed the indexes: %d", n)
	}
	if got := scanAll(old); !slices.Equal(got, want) {
		t.Errorf("primary key scan %q, want %q", got, want)
	}
	if got := boundaries(old); !slices.Equal(got, wantB) {
		t.Errorf("boundaries %q, want %q", got, wantB)
	}

	// An index of the name but another key is not the order index.
	admin(t, testURL(t), "CREATE INDEX "+orderIndexName("tasks")+" ON "+name+".tasks (_sync_partition, _sync_row_id)")
	wrong := openIn(t, name, Config{})
	ensure(t, wrong, c1)
	if ts, _ := wrong.table("tasks"); ts.ordered {
		t.Error("an index of another key is taken for the order index")
	}
	admin(t, testURL(t), "DROP INDEX "+name+"."+orderIndexName("tasks"))

	// The operator's concurrent build, taken at the next EnsureSchema.
	admin(t, testURL(t), "CREATE INDEX CONCURRENTLY "+orderIndexName("tasks")+" ON "+name+`.tasks (_sync_partition, _sync_row_id COLLATE "C")`)
	built := openIn(t, name, Config{})
	ensure(t, built, c1)
	if ts, _ := built.table("tasks"); !ts.ordered {
		t.Error("the operator's order index is not taken")
	}
	if got := scanAll(built); !slices.Equal(got, want) {
		t.Errorf("scan by the operator's index %q, want %q", got, want)
	}
	for _, limit := range []int{7, 40} {
		if got := visitAll(built, limit); !slices.Equal(got, want) {
			t.Errorf("visited by the operator's index (pages of %d) %q, want %q", limit, got, want)
		}
	}
}

// TestOrderIndexName: within Postgres's identifier length, distinct for
// long names that share their start, never cut inside a UTF-8 sequence.
func TestOrderIndexName(t *testing.T) {
	if got := orderIndexName("tasks"); got != "sync_order_tasks" {
		t.Errorf("orderIndexName(tasks) = %q", got)
	}
	long1, long2 := strings.Repeat("é", 40)+"a", strings.Repeat("é", 40)+"b"
	n1, n2 := orderIndexName(long1), orderIndexName(long2)
	if len(n1) > maxIdentifier || len(n2) > maxIdentifier || n1 == n2 || !utf8.ValidString(n1) {
		t.Errorf("long names: %q (%d), %q (%d)", n1, len(n1), n2, len(n2))
	}
}
