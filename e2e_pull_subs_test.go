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
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

// windowCounts counts a store's commit window reads.
type windowCounts struct{ batches, singles atomic.Int64 }

// countingPG and countingSQLite are the two drivers' stores counting
// their commit window reads (each embeds its store whole, so that the
// engine sees every capability it has).
type countingPG struct {
	*pgstore.Store
	*windowCounts
}

func (c countingPG) ReadCommitWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	c.batches.Add(1)
	return c.Store.ReadCommitWindows(ctx, partition, qs)
}

func (c countingPG) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	c.singles.Add(1)
	return c.Store.ReadCommitWindow(ctx, partition, q)
}

type countingSQLite struct {
	*sqlitestore.Store
	*windowCounts
}

func (c countingSQLite) ReadCommitWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	c.batches.Add(1)
	return c.Store.ReadCommitWindows(ctx, partition, qs)
}

func (c countingSQLite) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	c.singles.Add(1)
	return c.Store.ReadCommitWindow(ctx, partition, q)
}

// A client with several subscriptions, caught up, pulls the commits made
// since in each of its scopes and nothing of the others. The pull reads
// its sections' windows in one go (ReadCommitWindows, both drivers), each
// run of caught-up sections between sections that do something else
// (here: revoked ones) in one read, and a section alone between those
// reads its own. Fails when a section of a batched read misses or leaks a
// change, or when caught-up sections read window by window.
func TestE2EPullManySubscriptions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		counted := &windowCounts{}
		e := newE2EEnv(t, d, func(cfg *syncgo.Config) {
			switch st := cfg.Store.(type) {
			case *pgstore.Store:
				cfg.Store = countingPG{st, counted}
			case *sqlitestore.Store:
				cfg.Store = countingSQLite{st, counted}
			default:
				t.Fatalf("unexpected store %T", st)
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
		batches, singles = counted.batches.Load(), counted.singles.Load()
		if _, err := reader.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		want("a0", "a1", "a2", "a3", "a4", "b1", "b3", "b4")
		if b, s := counted.batches.Load()-batches, counted.singles.Load()-singles; b != 1 || s != 0 {
			t.Fatalf("the caught-up pull made %d batched and %d single window reads; want 1 and 0", b, s)
		}

		// p2 revoked: its section reads nothing, and the runs of caught-up
		// sections around it read theirs in one go each.
		e.allow("reader", map[string][]string{"project_id": {"p0", "p1", "p3", "p4"}})
		push([2]string{"c2", "p2"}, [2]string{"c4", "p4"}, [2]string{"c0", "p0"})
		round := func(wantBatches, wantSingles int64, ids ...string) {
			t.Helper()
			batches, singles = counted.batches.Load(), counted.singles.Load()
			if _, err := reader.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			want(ids...)
			if b, s := counted.batches.Load()-batches, counted.singles.Load()-singles; b != wantBatches || s != wantSingles {
				t.Fatalf("the pull made %d batched and %d single window reads; want %d and %d", b, s, wantBatches, wantSingles)
			}
		}
		round(2, 0, "a0", "a1", "a3", "a4", "b1", "b3", "b4", "c0", "c4")
		// p1 and p3 revoked too: no run of two is left.
		e.allow("reader", map[string][]string{"project_id": {"p0", "p4"}})
		push([2]string{"d0", "p0"}, [2]string{"d1", "p1"}, [2]string{"d4", "p4"})
		round(0, 2, "a0", "a4", "b4", "c0", "c4", "d0", "d4")
	})
}
