package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// visitDenseRows visits each entry's row from the window as it arrives,
// and hands the rest to the caller (not done, with the rows visited so
// far) where collectDenseRows gives up or would sort.
func TestVisitDenseRows(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	query := func(entries []string, window []string) string {
		var parts []string
		for i, id := range entries {
			parts = append(parts, fmt.Sprintf(`('%s', -1, %d)`, id, i))
		}
		for i, id := range window {
			parts = append(parts, fmt.Sprintf(`('%s', %d, %d)`, id, 10+i, 1000+i))
		}
		return `SELECT v.id, v.n::bigint, NULL::jsonb, CASE WHEN v.n < 0 THEN NULL ELSE convert_to('payload ' || v.id, 'UTF8') END, NULL::bytea
  FROM (VALUES ` + strings.Join(parts, ", ") + `) AS v(id, n, o) ORDER BY v.o`
	}
	for _, c := range []struct {
		name            string
		entries, window []string
		stopAfter       int
		visited         []string
		done            bool
	}{
		{"dense", []string{"a", "b", "c"}, []string{"a", "b", "c"}, 0, []string{"a", "b", "c"}, true},
		{"window rows outside the value skipped", []string{"b", "d"}, []string{"a", "b", "c", "d", "e"}, 0, []string{"b", "d"}, true},
		{"no entries", nil, []string{"a"}, 0, nil, true},
		{"stopped", []string{"a", "b", "c"}, []string{"a", "b", "c"}, 2, []string{"a", "b"}, true},
		{"entries out of order", []string{"b", "B", "a"}, []string{"a", "b", "B"}, 0, nil, false},
		{"window out of order", []string{"a", "b"}, []string{"a", "c", "b"}, 0, []string{"a"}, false},
		{"an entry past the window", []string{"a", "b", "z"}, []string{"a", "b", "c"}, 0, []string{"a", "b"}, false},
		{"an entry without a row", []string{"a", "bb", "c"}, []string{"a", "b", "c"}, 0, []string{"a"}, false},
		{"an entry before the window", []string{"0", "a"}, []string{"a", "b"}, 0, nil, false},
	} {
		rows, err := s.pool.Query(ctx, query(c.entries, c.window))
		if err != nil {
			t.Fatal(err)
		}
		var visited []string
		n, last, done, err := visitDenseRows(rows, "tasks", 10, func(r *store.Row) bool {
			if string(r.Payload) != "payload "+r.RowID || r.ColumnVersions != nil || r.Table != "tasks" {
				t.Errorf("%s: row %+v", c.name, r)
			}
			visited = append(visited, strings.Clone(r.RowID))
			return c.stopAfter == 0 || len(visited) < c.stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(visited, c.visited) || n != len(visited) || done != c.done {
			t.Errorf("%s: visited %v (n %d), done %v; want %v, %v", c.name, visited, n, done, c.visited, c.done)
		}
		if n > 0 && last != visited[n-1] {
			t.Errorf("%s: last %q, want %q", c.name, last, visited[n-1])
		}
	}
}

// VisitRows visits the rows ScanRows returns, in order: a dense value, a
// value the dense read gives up on part-way, other scans.
func TestVisitRowsMatchesScanRows(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	if ts, _ := s.table("tasks"); !ts.ordered {
		t.Fatal("the test table is not ordered: the dense scan is not used")
	}
	var ws []store.RowWrite
	for i := range 300 {
		project := "p2"
		if i < 120 || i%9 == 0 {
			project = "p1" // dense, then sparse
		}
		ws = append(ws, task{id: fmt.Sprintf("r%03d", i), project: project, owner: fmt.Sprint("o", i%2)}.write(t, c, 1))
	}
	apply(t, s, "p", ws...)
	type seen struct {
		id      string
		version int64
		payload string
		cols    string
	}
	cp := func(r *store.Row) seen {
		return seen{strings.Clone(r.RowID), r.ServerVersion, string(r.Payload), string(r.ColumnVersions)}
	}
	for _, sc := range []struct {
		name     string
		scopes   wire.ScopeMap
		noScopes bool
	}{
		{"one value", scope("project_id", "p1"), true},
		{"other value", scope("project_id", "p2"), true},
		{"scopes read", scope("project_id", "p1"), false},
		{"two values", wire.ScopeMap{{Key: "project_id", Values: []string{"p1", "p2"}}}, true},
	} {
		for _, limit := range []int{5, 50, 121, 1000} {
			for _, after := range []string{"", "r100", "r119", "r290"} {
				q := store.RowScanQuery{Table: "tasks", Scopes: sc.scopes, Limit: limit, NoScopes: sc.noScopes}
				if after != "" {
					q.After = &after
				}
				want, err := s.ScanRows(ctx, "p", q)
				if err != nil {
					t.Fatal(err)
				}
				var got []seen
				if err := s.VisitRows(ctx, "p", q, func(r *store.Row) bool { got = append(got, cp(r)); return true }); err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s, limit %d after %q: visited %d rows, ScanRows %d", sc.name, limit, after, len(got), len(want))
				}
				for i := range want {
					if w := cp(&want[i]); got[i] != w {
						t.Fatalf("%s, limit %d after %q: row %d visited %+v, ScanRows %+v", sc.name, limit, after, i, got[i], w)
					}
				}
			}
		}
	}
}
