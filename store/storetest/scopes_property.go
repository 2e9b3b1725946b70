package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The property test's dimensions.
const (
	propertyCommits = 200
	propertyQueries = 40
)

// The scope values of the property test: "x" is a value of both
// variables, and "none" of no row.
var (
	propertyProjects = []string{"p1", "p2", "p3", "x"}
	propertyTeams    = []string{"t1", "t2", "x"}
)

// propertyIDs are row ids whose bytewise order differs from case-folded,
// collated and UTF-16 orders.
func propertyIDs(prefix string, n int) []string {
	ids := []string{"A", "B", "a", "b", "Z", "z", "0", "9", "10", "a-1", "a_1", "a.1", "a1", "a b",
		"a'b", "a\"b", "a%b", "a\\b", "é", "e\u0301", "ñ", "Ω", "\uE000", "\uFFFD", "\U0001F600"}
	for i := range n {
		ids = append(ids, fmt.Sprintf("%s%03d", prefix, i))
	}
	return ids
}

func testScopeProperty(t *testing.T, open Opener) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runScopeProperty(t, open, seed)
		})
	}
}

// runScopeProperty applies random commits of upserts, scope moves and
// deletes to notes and tasks of p1 (with noise in p2), then compares
// random queries with the model, before and after a prune.
func runScopeProperty(t *testing.T, open Opener, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	f := newScopeFixture(t, open)
	f.touch("p2")
	noteIDs, taskIDs := propertyIDs("n", 120), propertyIDs("t", 10)
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for range propertyCommits {
		var (
			writes  []store.RowWrite
			deletes []rowKey
			used    = make(map[rowKey]bool)
		)
		for range 1 + rng.IntN(4) {
			k := rowKey{TableNotes, pick(noteIDs)}
			if rng.IntN(6) == 0 {
				k = rowKey{TableTasks, pick(taskIDs)}
			}
			if used[k] {
				continue
			}
			used[k] = true
			cur, exists := f.m.rows[k]
			if exists && rng.IntN(4) == 0 {
				deletes = append(deletes, k)
				continue
			}
			var values []wire.Value
			if k.table == TableNotes {
				n := Note{ID: k.id, ProjectID: pick(propertyProjects), TeamID: pick(propertyTeams)}
				if rng.IntN(2) == 0 {
					n.Body = ptr(fmt.Sprintf("body %d", rng.IntN(1000)))
				}
				values = n.Values()
			} else {
				values = Task{ID: k.id, ProjectID: pick(propertyProjects), N: ptr(rng.Int64N(1 << 40))}.Values()
			}
			w := NewRowWrite(t, FixtureSchema(t), k.table, values, cur.ServerVersion+1)
			if rng.IntN(4) == 0 {
				w.ColumnVersions = []byte{byte(rng.IntN(4)), byte(w.ServerVersion)}
			}
			writes = append(writes, w)
		}
		if len(writes)+len(deletes) == 0 {
			continue
		}
		f.commit(writes, deletes...)
		if rng.IntN(8) == 0 {
			f.upsert("p2", Note{ID: pick(noteIDs), ProjectID: pick(propertyProjects), TeamID: pick(propertyTeams)}.RowWrite(t, 1))
		}
	}
	newest := f.m.commits[len(f.m.commits)-1].Seq
	randomQuery := func() (string, wire.ScopeMap) {
		table := TableNotes
		if rng.IntN(5) == 0 {
			table = TableTasks
		}
		var scopes wire.ScopeMap
		keys := rng.IntN(3) // 0: project, 1: team, 2: both
		for i, domain := range [][]string{propertyProjects, propertyTeams} {
			if keys != 2 && keys != i {
				continue
			}
			values := append([]string{"none"}, domain...)
			rng.Shuffle(len(values), func(a, b int) { values[a], values[b] = values[b], values[a] })
			scopes = append(scopes, wire.ScopeValues{Key: []string{VarProject, VarTeam}[i], Values: values[:1+rng.IntN(3)]})
		}
		return table, scopes
	}
	limits := []int{0, 1, 2, 3, 5, 8}
	query := func(after int64) bool {
		table, scopes := randomQuery()
		a := after + rng.Int64N(newest-after+1)
		b := a + rng.Int64N(newest-a+1)
		return f.checkWindow(f.m, table, scopes, after, newest, 0) &&
			f.checkWindow(f.m, table, scopes, after, newest, 1+rng.IntN(8)) &&
			f.checkWindow(f.m, table, scopes, a, b, limits[rng.IntN(len(limits))]) &&
			f.checkScan(f.m, table, scopes, []int{1, 2, 7, 50, 1000}[rng.IntN(5)])
	}
	for range propertyQueries {
		if !query(0) {
			t.Logf("seed %d", seed)
			return
		}
	}
	horizon := newest / 3
	f.prune("p1", epochOf("p1"), horizon)
	f.m.prune(horizon)
	for i := range propertyQueries / 4 {
		if !query([]int64{0, horizon}[i%2]) {
			t.Logf("seed %d, after pruning through %d", seed, horizon)
			return
		}
	}
}
