package sqlitestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// scopeTestPartition is the partition of the scope index tests.
const scopeTestPartition = "p"

// scopeTestStore opens a store on a fresh file with the fixture schema.
func scopeTestStore(t *testing.T) testStore {
	t.Helper()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(t.Context(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

// scopeEntry is an entry of sync_row_scopes, with its rowid.
type scopeEntry struct {
	rowid             int64
	rowID, key, value string
}

func (e scopeEntry) pair() string { return e.key + "=" + e.value }

// scopeEntries reads the tasks' scope index entries of the test
// partition, of one row or (rowID "") of all, in row, key, value order.
func scopeEntries(t *testing.T, s testStore, rowID string) []scopeEntry {
	t.Helper()
	var out []scopeEntry
	err := s.read(t.Context(), func(c *conn) error {
		rs, err := c.query(`SELECT rowid, row_id, var, value FROM sync_row_scopes
WHERE partition=? AND tbl='tasks' AND (?='' OR row_id=?) ORDER BY row_id, var, value`, scopeTestPartition, rowID, rowID)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var e scopeEntry
			if err := rs.Scan(&e.rowid, &e.rowID, &e.key, &e.value); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rs.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// upsertScoped writes task id with the given scopes (key, value pairs in
// canonical key order) in a write of its own.
func upsertScoped(t *testing.T, s testStore, id string, version int64, scopes ...string) {
	t.Helper()
	w := storetest.Task{ID: id, ProjectID: "p1"}.RowWrite(t, version)
	w.Scopes = nil
	for i := 0; i < len(scopes); i += 2 {
		w.Scopes = append(w.Scopes, wire.StoredScope{Key: scopes[i], Value: scopes[i+1]})
	}
	err := s.Write(t.Context(), scopeTestPartition, func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, w) })
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpsertRowScopeIndex: an upsert leaves exactly the row's scopes in
// its scope index entries, whatever it had before, and an update that
// keeps an entry does not write it again (the entry keeps its rowid; a
// delete and insert gives it a new one).
func TestUpsertRowScopeIndex(t *testing.T) {
	t.Parallel()
	s := scopeTestStore(t)
	pairs := func(es []scopeEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.pair())
		}
		return out
	}
	rowid := func(es []scopeEntry, key string) int64 {
		for _, e := range es {
			if e.key == key {
				return e.rowid
			}
		}
		t.Fatalf("no entry %s in %v", key, es)
		return 0
	}
	steps := []struct {
		scopes []string
		want   []string
		kept   []string // entries that must keep their rowid
	}{
		{[]string{"project_id", "p1"}, []string{"project_id=p1"}, nil},
		{[]string{"project_id", "p1"}, []string{"project_id=p1"}, []string{"project_id"}},
		{[]string{"project_id", "p2"}, []string{"project_id=p2"}, nil},
		{[]string{"owner", "o1", "project_id", "p2"}, []string{"owner=o1", "project_id=p2"}, []string{"project_id"}},
		{[]string{"owner", "o2", "project_id", "p2"}, []string{"owner=o2", "project_id=p2"}, []string{"project_id"}},
		{[]string{"owner", "o2", "project_id", "p2"}, []string{"owner=o2", "project_id=p2"}, []string{"owner", "project_id"}},
		{[]string{"owner", "o2"}, []string{"owner=o2"}, []string{"owner"}},
		{nil, nil, nil},
	}
	prev := scopeEntries(t, s, "t1")
	for i, st := range steps {
		upsertScoped(t, s, "t1", int64(i+1), st.scopes...)
		if i == 0 {
			// An entry after t1's: a deleted and inserted entry of t1
			// then gets a rowid above it, not its own back.
			upsertScoped(t, s, "t2", 1, "project_id", "p1")
		}
		got := scopeEntries(t, s, "t1")
		if !slices.Equal(pairs(got), st.want) {
			t.Fatalf("step %d: entries %v, want %v", i, pairs(got), st.want)
		}
		for _, k := range st.kept {
			if a, b := rowid(prev, k), rowid(got, k); a != b {
				t.Errorf("step %d: the unchanged entry %s was written again (rowid %d -> %d)", i, k, a, b)
			}
		}
		prev = got
	}
}

// TestUpsertRowScopeIndexRandom: random upserts (zero to three scopes
// from a small pool, in canonical key order) and deletes of a few rows
// leave the scope index holding exactly each stored row's scopes and
// nothing of a deleted one, after every write.
func TestUpsertRowScopeIndexRandom(t *testing.T) {
	t.Parallel()
	s := scopeTestStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	values := []string{"1", "2"}
	model := map[string][]string{} // row id -> "key=value" entries, sorted
	for step := range 300 {
		id := fmt.Sprintf("r%d", rng.IntN(5))
		var op string
		if rng.IntN(5) == 0 {
			op = "delete " + id
			delete(model, id)
			err := s.Write(t.Context(), scopeTestPartition, func(ctx context.Context, tx store.WriteTx) error {
				return tx.DeleteRow(ctx, "tasks", id)
			})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			var scopes, want []string
			for _, k := range keys {
				if rng.IntN(2) == 0 {
					v := values[rng.IntN(len(values))]
					scopes = append(scopes, k, v)
					want = append(want, k+"="+v)
				}
			}
			op = fmt.Sprintf("upsert %s %v", id, want)
			model[id] = want
			upsertScoped(t, s, id, int64(step+1), scopes...)
		}
		got := map[string][]string{}
		for _, e := range scopeEntries(t, s, "") {
			got[e.rowID] = append(got[e.rowID], e.pair())
		}
		for id, want := range model {
			if !slices.Equal(got[id], want) {
				t.Fatalf("step %d (%s): row %s has entries %v, want %v", step, op, id, got[id], want)
			}
		}
		for id, entries := range got {
			if _, ok := model[id]; !ok {
				t.Fatalf("step %d (%s): row %s is not stored but has entries %v", step, op, id, entries)
			}
		}
	}
}
