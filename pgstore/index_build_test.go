package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMissingIndexBuiltWithoutHoldingWriters: a database that lacks
// sync_row_scopes_by_row (one an older syncgo or the reference created)
// gets it at Open without holding back the writers of the processes
// already running on it: while Open builds it over a large
// sync_row_scopes, a writer's first locks (sync_partitions and
// sync_row_scopes, ROW EXCLUSIVE) are always granted at once.
func TestMissingIndexBuiltWithoutHoldingWriters(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	admin(t, testURL(t), "DROP INDEX "+name+".sync_row_scopes_by_row")
	admin(t, testURL(t), "INSERT INTO "+name+".sync_row_scopes SELECT 'bulk', 'tasks', 'project_id', 'p' || (i % 100), 'r' || i FROM generate_series(1, 300000) i")

	ctx := context.Background()
	probe, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	if _, err := probe.Exec(ctx, "SET search_path = "+name); err != nil {
		t.Fatal(err)
	}
	var (
		stop            atomic.Bool
		probes, refused int
		firstRefusal    string
		wg              sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			probes++
			err := pgx.BeginFunc(ctx, probe, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "LOCK TABLE sync_partitions IN ROW EXCLUSIVE MODE NOWAIT; LOCK TABLE sync_row_scopes IN ROW EXCLUSIVE MODE NOWAIT")
				return err
			})
			if err != nil {
				if refused == 0 {
					firstRefusal = err.Error()
				}
				refused++
			}
		}
	}()
	openIn(t, name, Config{})
	stop.Store(true)
	wg.Wait()
	exists := queryInt(t, s, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = 'sync_row_scopes_by_row' AND c.relnamespace = $1::regnamespace AND i.indisvalid`, name)
	if exists != 1 {
		t.Fatal("Open did not build a valid sync_row_scopes_by_row")
	}
	if refused > 0 {
		t.Fatalf("while Open built the index, %d of %d writer lock probes were refused (first: %s)", refused, probes, firstRefusal)
	}
	if probes < 2 {
		t.Fatalf("only %d probes ran during Open", probes)
	}
	t.Logf("%d probes, none refused", probes)
}

// TestMissingIndexBuiltByConcurrentOpens: processes that start together
// on a database without sync_row_scopes_by_row all open, and the index
// they leave is valid.
func TestMissingIndexBuiltByConcurrentOpens(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	admin(t, testURL(t), "DROP INDEX "+name+".sync_row_scopes_by_row")
	admin(t, testURL(t), "INSERT INTO "+name+".sync_row_scopes SELECT 'bulk', 'tasks', 'project_id', 'p' || (i % 100), 'r' || i FROM generate_series(1, 50000) i")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := Open(context.Background(), Config{Pool: newPool(t, name, 4)})
			if err == nil {
				err = st.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	valid := queryInt(t, s, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = 'sync_row_scopes_by_row' AND c.relnamespace = $1::regnamespace AND i.indisvalid`, name)
	if valid != 1 {
		t.Fatalf("%d valid sync_row_scopes_by_row after concurrent Opens, want 1", valid)
	}
}

// TestAbandonedIndexBuildRebuiltAtOpen: an index that a concurrent build
// left invalid (its process died during the build) is not taken for
// built: the next Open drops and builds it, and it is valid.
func TestAbandonedIndexBuildRebuiltAtOpen(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	// What an interrupted CREATE INDEX CONCURRENTLY leaves: the index in
	// the catalog, marked invalid.
	admin(t, testURL(t), "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '"+name+".sync_row_scopes_by_row'::regclass")
	valid := func() int64 {
		return queryInt(t, s, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = 'sync_row_scopes_by_row' AND c.relnamespace = $1::regnamespace AND i.indisvalid`, name)
	}
	if valid() != 0 {
		t.Fatal("the index is still valid")
	}
	openIn(t, name, Config{})
	if valid() != 1 {
		t.Fatal("Open left sync_row_scopes_by_row invalid")
	}
}
