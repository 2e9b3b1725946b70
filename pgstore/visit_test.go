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

// visitTableRows visits the rows of the value as they arrive, and hands
// the rest to the caller (not done, with the rows visited so far) when
// the value is sparse or the rows are out of order.
func TestVisitTableRows(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	// rows are "id" (of the value) or "id-" (another value's).
	query := func(rows []string) string {
		var parts []string
		for i, r := range rows {
			id, m := strings.CutSuffix(r, "-")
			parts = append(parts, fmt.Sprintf(`('%s', %d, %v, %d)`, id, 10+i, !m, i))
		}
		return `SELECT v.id, v.n::bigint, v.m, CASE WHEN v.m THEN convert_to('payload ' || v.id, 'UTF8') END, NULL::bytea
  FROM (VALUES ` + strings.Join(parts, ", ") + `) AS v(id, n, m, o) ORDER BY v.o`
	}
	var sparse []string
	for i := range denseSlack + 1 {
		sparse = append(sparse, fmt.Sprintf("b%03d-", i))
	}
	// Every other row of the value: the walk reads 100 + denseSlack rows
	// and visits half of them, fewer than its limit of 100.
	var half, halfVisited []string
	for i := range 100 + denseSlack {
		id := fmt.Sprintf("h%03d", i)
		if i%2 == 0 {
			half, halfVisited = append(half, id), append(halfVisited, id)
		} else {
			half = append(half, id+"-")
		}
	}
	for _, c := range []struct {
		name      string
		rows      []string
		limit     int
		stopAfter int
		visited   []string
		end       walkEnd
		budget    int // rows the walk reads: limit when 0
	}{
		{"dense to the end", []string{"a", "b", "c"}, 10, 0, []string{"a", "b", "c"}, walkDone, 0},
		{"others skipped", []string{"a-", "b", "c-", "d", "e-"}, 10, 0, []string{"b", "d"}, walkDone, 0},
		{"nothing of the value", []string{"a-"}, 10, 0, nil, walkDone, 0},
		{"limit reached", []string{"a", "b", "c", "d"}, 3, 0, []string{"a", "b", "c"}, walkFull, 0},
		{"stopped", []string{"a", "b", "c"}, 10, 2, []string{"a", "b"}, walkDone, 0},
		{"stopped at the limit", []string{"a", "b", "c"}, 2, 2, []string{"a", "b"}, walkDone, 0},
		{"out of order", []string{"a", "c", "b"}, 10, 0, []string{"a", "c"}, walkGaveUp, 0},
		{"a repeated id", []string{"a", "a"}, 10, 0, []string{"a"}, walkGaveUp, 0},
		{"sparse", append(append([]string{"a"}, sparse...), "c"), 100, 0, []string{"a"}, walkGaveUp, 0},
		{"the partition's end before the walk's length", append([]string{"a"}, sparse[:denseSlack]...), 3, 0, []string{"a"}, walkDone, 0},
		{"the walk's full length, fewer than one in walkDensity of the value", append(append([]string{"a"}, sparse[:denseSlack]...), "c", "d-"), 3, 0, []string{"a", "c"}, walkGaveUp, 0},
		{"the walk's full length, half of the value", half, 100, 0, halfVisited, walkShort, 0},
		{"a budget past the limit, half of the value", half, 10, 0, halfVisited[:10], walkFull, 100},
		{"the budget read before the limit, half of the value", half[:40+denseSlack], 60, 0, halfVisited[:(40+denseSlack)/2], walkShort, 40},
	} {
		rows, err := s.pool.Query(ctx, query(c.rows))
		if err != nil {
			t.Fatal(err)
		}
		var visited []string
		budget := c.budget
		if budget == 0 {
			budget = c.limit
		}
		n, last, _, end, err := visitTableRows(rows, "tasks", c.limit, budget, func(r *store.Row) bool {
			if string(r.Payload) != "payload "+r.RowID || r.ColumnVersions != nil || r.Table != "tasks" {
				t.Errorf("%s: row %+v", c.name, r)
			}
			visited = append(visited, strings.Clone(r.RowID))
			return c.stopAfter == 0 || len(visited) < c.stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(visited, c.visited) || n != len(visited) || end != c.end {
			t.Errorf("%s: visited %v (n %d), end %v; want %v, %v", c.name, visited, n, end, c.visited, c.end)
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
	for i := range 1200 {
		project := "p2"
		switch {
		case i >= 700:
			project = []string{"p4", "p5"}[i%2] // half of the rows each: walked on past a walk's full length
		case i%100 == 50:
			project = "p3" // too sparse for the table walk
		case i < 400 || i%9 == 0:
			project = "p1" // dense past a first walk (firstWalk), then sparse
		}
		ws = append(ws, task{id: fmt.Sprintf("r%04d", i), project: project, owner: fmt.Sprint("o", i%2)}.write(t, c, 1))
	}
	apply(t, s, "p", ws...)
	// Some rows' scopes in the form the reference writes, a JSONB string
	// holding the document (COMPAT.md, difference 11): the table walk
	// reads them as the index entries say.
	if _, err := s.pool.Exec(ctx, `UPDATE "tasks" SET _sync_scopes = to_jsonb(_sync_scopes::text) WHERE _sync_row_id IN ('r0000', 'r0050', 'r0119', 'r0300', 'r0405', 'r0603', 'r0800', 'r0901')`); err != nil {
		t.Fatal(err)
	}
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
		{"sparse value", scope("project_id", "p3"), true},
		{"half of the rows", scope("project_id", "p4"), true},
		{"scopes read", scope("project_id", "p1"), false},
		{"two values", wire.ScopeMap{{Key: "project_id", Values: []string{"p1", "p2"}}}, true},
	} {
		for _, limit := range []int{5, 50, 121, firstWalk, firstWalk + 44, 1000} {
			for _, after := range []string{"", "r0100", "r0119", "r0399", "r0650", "r0900"} {
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
