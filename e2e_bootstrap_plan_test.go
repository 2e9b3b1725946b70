package syncgo_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
)

// racingBoundaries runs a hook once, right after the first page boundary
// walk returned: writes that land between the walk and the page builds.
type racingBoundaries struct {
	store.Store
	walks atomic.Int64
	once  sync.Once
	hook  func()
}

func (s *racingBoundaries) PageBoundaries(ctx context.Context, partition string, q store.RowScanQuery, pages int) ([]string, error) {
	b, err := s.Store.PageBoundaries(ctx, partition, q, pages)
	if err == nil && len(b) > 0 {
		s.walks.Add(1)
		s.once.Do(s.hook)
	}
	return b, err
}

// The pages of a bootstrap are planned from the scope index and built
// concurrently; rows written between the walk and the builds (new rows
// inside a page's range, a boundary row deleted, a row updated) move no
// row out of every page: each planned page holds the rows through its
// boundary, and one that now holds more than the limit ends at the limit
// and leaves the plan (the pages after it are built one by one), so no
// page exceeds limitSnapshotRows and the client ends with the server's
// rows. The new rows go into the second page's range: the first page is
// built while the boundaries are walked (a row written into its range
// after its scan reaches the client by the log, after asOf, not by this
// round's pages).
func TestE2EBootstrapPlanRacesWrites(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var rs *racingBoundaries
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			rs = &racingBoundaries{Store: c.Store}
			c.Store = rs
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 30 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
		}
		mustUpsert(t, w, taskRow("o1", "p2", "other scope"))
		syncQuiet(t, w)
		// Three rows inside the second page's range (t05..t09), its
		// boundary deleted, one row updated and one added after the last
		// boundary.
		rs.hook = writeDuringBootstrap(t, w, []string{"t05a", "t05b", "t05c", "t27a"}, "t12", "t09")
		c := e.client("alice", sspclient.Options{LimitSnapshotRows: 5, MaxSnapshotPages: 20})
		mustSubscribe(t, c, "tasks-p1", "p1")
		rounds := syncQuiet(t, c)
		if rs.walks.Load() == 0 {
			t.Fatal("the bootstrap walked no page boundaries")
		}
		checkRacedBootstrap(t, e, c, rounds, 33)
	})
}

// writeDuringBootstrap returns a hook that writes while a bootstrap's
// pages are read: rows added, one updated and one deleted, all in p1.
func writeDuringBootstrap(t *testing.T, w *sspclient.Client, added []string, updated, deleted string) func() {
	return func() {
		for _, id := range added {
			mustUpsert(t, w, taskRow(id, "p1", "late"))
		}
		mustUpsert(t, w, taskRow(updated, "p1", "updated"))
		if _, err := w.Delete("tasks", deleted); err != nil {
			t.Errorf("delete %s: %v", deleted, err)
		}
		syncQuiet(t, w)
	}
}

// checkRacedBootstrap checks the rounds of a bootstrap of p1 in pages of
// 5 rows that writes raced: no page held more than limitSnapshotRows, and
// the client holds the server's n rows of p1. It returns the segments
// the rounds applied.
func checkRacedBootstrap(t *testing.T, e *e2eEnv, c *sspclient.Client, rounds []*sspclient.RoundResult, n int) int {
	t.Helper()
	pages := 0
	for _, round := range rounds {
		for _, sec := range round.Sections {
			if sec.MaxSegmentRows > 5 {
				t.Fatalf("a page held %d rows; limitSnapshotRows is 5 (§4.7)", sec.MaxSegmentRows)
			}
			pages += sec.Segments
		}
	}
	got := clientRowsIn(t, c, "p1")
	want := map[string]string{}
	for id, v := range e.serverRows("tasks") {
		if id != "o1" {
			want[id] = v
		}
	}
	sameRows(t, "client vs server after a bootstrap raced by writes", got, want)
	if len(got) != n {
		t.Fatalf("the client holds %d rows, want %d", len(got), n)
	}
	return pages
}

// countingScans counts the row scans that start at the beginning of the
// table (no After cursor).
type countingScans struct {
	store.Store
	fromStart atomic.Int64
}

func (s *countingScans) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	if q.After == nil {
		s.fromStart.Add(1)
	}
	return s.Store.ScanRows(ctx, partition, q)
}

// The first page of a planned bootstrap is built while the boundaries
// are walked, as the page-by-page loop would build it, and the plan takes
// it when it ends at the first boundary: the table's start is scanned
// once, not once for the page and again for the plan's first page.
func TestE2EBootstrapPlanReusesFirstPage(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var cs *countingScans
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			cs = &countingScans{Store: c.Store}
			c.Store = cs
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 30 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%02d", i), "p1", "row"))
		}
		syncQuiet(t, w)
		cs.fromStart.Store(0)
		c := e.client("alice", sspclient.Options{LimitSnapshotRows: 5, MaxSnapshotPages: 20})
		mustSubscribe(t, c, "tasks-p1", "p1")
		rounds := syncQuiet(t, c)
		if got := len(clientRowsIn(t, c, "p1")); got != 30 {
			t.Fatalf("the client holds %d rows, want 30", got)
		}
		pages := 0
		for _, round := range rounds {
			for _, sec := range round.Sections {
				pages += sec.Segments
			}
		}
		if pages != 6 {
			t.Fatalf("the bootstrap took %d pages, want 6 of 5 rows", pages)
		}
		if n := cs.fromStart.Load(); n != 1 {
			t.Fatalf("the table's start was scanned %d times, want once", n)
		}
	})
}
