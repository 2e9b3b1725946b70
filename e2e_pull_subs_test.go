package syncgo_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/store"
)

// countingWindows is a Postgres store that counts its commit window reads.
type countingWindows struct {
	*pgstore.Store
	batches, singles atomic.Int64
}

func (c *countingWindows) ReadCommitWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	c.batches.Add(1)
	return c.Store.ReadCommitWindows(ctx, partition, qs)
}

func (c *countingWindows) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	c.singles.Add(1)
	return c.Store.ReadCommitWindow(ctx, partition, q)
}

// A client with several subscriptions, caught up, pulls the commits made
// since in each of its scopes and nothing of the others. On Postgres the
// pull reads all its sections' windows in one go (ReadCommitWindows),
// unless a section does something else (here: one revoked), when each
// section reads its own. Fails when a section of the batched read misses
// or leaks a change, or when the caught-up pull reads window by window.
func TestE2EPullManySubscriptions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var counted *countingWindows
		e := newE2EEnv(t, d, func(cfg *syncgo.Config) {
			if pg, ok := cfg.Store.(*pgstore.Store); ok {
				counted = &countingWindows{Store: pg}
				cfg.Store = counted
			}
		})
		ctx := context.Background()
		writer := e.client("writer", sspclient.Options{})
		syncQuiet(t, writer)
		push := func(rows ...[2]string) {
			t.Helper()
			for _, r := range rows {
				if _, err := writer.Upsert("tasks", taskRow(r[0], r[1], "x")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := writer.Push(ctx); err != nil {
				t.Fatal(err)
			}
		}
		push([2]string{"a0", "p0"}, [2]string{"a1", "p1"}, [2]string{"a2", "p2"}, [2]string{"a3", "p3"}, [2]string{"a4", "p4"},
			[2]string{"x", "elsewhere"})
		reader := e.client("reader", sspclient.Options{})
		for i := range 5 {
			if err := reader.Subscribe(fmt.Sprintf("s%d", i), "tasks", map[string][]string{"project_id": {fmt.Sprintf("p%d", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		syncQuiet(t, reader)
		want := func(ids ...string) {
			t.Helper()
			got := slices.Sorted(maps.Keys(reader.Rows("tasks")))
			slices.Sort(ids)
			if !slices.Equal(got, ids) {
				t.Fatalf("reader holds %v, want %v", got, ids)
			}
		}
		want("a0", "a1", "a2", "a3", "a4")

		push([2]string{"b1", "p1"}, [2]string{"b3", "p3"}, [2]string{"y", "elsewhere"}, [2]string{"b4", "p4"})
		var batches, singles int64
		if counted != nil {
			batches, singles = counted.batches.Load(), counted.singles.Load()
		}
		if _, err := reader.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		want("a0", "a1", "a2", "a3", "a4", "b1", "b3", "b4")
		if counted != nil {
			if b, s := counted.batches.Load()-batches, counted.singles.Load()-singles; b != 1 || s != 0 {
				t.Fatalf("the caught-up pull made %d batched and %d single window reads; want 1 and 0", b, s)
			}
		}

		// p4 revoked: its section reads nothing, the others their own.
		e.allow("reader", map[string][]string{"project_id": {"p0", "p1", "p2", "p3"}})
		push([2]string{"c2", "p2"}, [2]string{"c4", "p4"})
		if counted != nil {
			batches, singles = counted.batches.Load(), counted.singles.Load()
		}
		if _, err := reader.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		want("a0", "a1", "a2", "a3", "b1", "b3", "c2")
		if counted != nil {
			if b, s := counted.batches.Load()-batches, counted.singles.Load()-singles; b != 0 || s != 4 {
				t.Fatalf("the pull with a revoked section made %d batched and %d single window reads; want 0 and 4", b, s)
			}
		}
	})
}
