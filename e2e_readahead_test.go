package syncgo_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// readAheadCounts returns the read-ahead counters of a scrape.
func readAheadCounts(t *testing.T, e *metricsEnv) (read, used float64) {
	t.Helper()
	s := e.scrape()
	return s.must(t, "syncgo_pull_read_ahead_total", "result", "read"), s.must(t, "syncgo_pull_read_ahead_total", "result", "used")
}

// pushTaskCommits pushes n one-upsert commits of tasks id<first>... in project.
func pushTaskCommits(t *testing.T, w *sspclient.Client, first, n int, project func(i int) string) {
	t.Helper()
	for i := first; i < first+n; i++ {
		mustUpsert(t, w, taskRow(fmt.Sprintf("t%03d", i), project(i), "x"))
		if _, err := w.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func inP1(int) string { return "p1" }

// readAheadPair is a writer and a reader (pulling limit commits per
// window) subscribed to projects under id, both synced once, and n task
// commits pushed by the writer (project(i) each).
func readAheadPair(t *testing.T, d e2eDriver, id string, projects []string, limit int32, n int, project func(int) string) (e *metricsEnv, w, r *sspclient.Client) {
	t.Helper()
	e = newMetricsEnv(t, d)
	w = e.client("writer", sspclient.Options{})
	r = e.client("reader", sspclient.Options{LimitCommits: limit})
	mustSubscribe(t, w, id, projects...)
	mustSubscribe(t, r, id, projects...)
	syncQuiet(t, w)
	syncQuiet(t, r) // bootstrap of the empty scope: the cursor is at the head
	pushTaskCommits(t, w, 0, n, project)
	return e, w, r
}

// A catch-up in windows of 5 commits: every window after the first was
// read ahead while the client read the one before, and taken by the
// client's next request; commits pushed meanwhile are caught up too, and
// the replica ends equal to the server, every commit once.
func TestE2EReadAheadCatchUp(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, w, r := readAheadPair(t, d, "tasks-p1", []string{"p1"}, 5, 23, inP1)

		ctx := context.Background()
		got := 0
		for round := 0; round < 20; round++ {
			if round == 2 {
				pushTaskCommits(t, w, 23, 4, inP1) // while the reader is behind
			}
			res, err := r.Round(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s := sectionOf(t, res, "tasks-p1")
			if s.Status != wire.SubActive || s.Commits > 5 {
				t.Fatalf("round %d: status %s, %d commits; want active and at most 5", round, s.Status, s.Commits)
			}
			got += s.Commits
			if s.Commits == 0 {
				break
			}
		}
		if got != 27 {
			t.Fatalf("caught up %d commits, want 27", got)
		}
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), e.serverRows("tasks"))
		read, used := readAheadCounts(t, e)
		// 27 commits in windows of 5: the first five windows were cut
		// short by the limit, so the second to the sixth were read ahead
		// and used (the one read while the writer pushed may have
		// outlived its 2 s on a loaded machine).
		if read < 5 || used < 4 || used > read {
			t.Fatalf("read ahead %v windows, used %v; want at least 5 read and 4 used, used <= read", read, used)
		}
	})
}

// A window read ahead is not served when the log was pruned past the
// client's cursor before its next request: that request answers reset
// (sync.cursor_expired) with no commits.
func TestE2EReadAheadNotAfterPrune(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, _, r := readAheadPair(t, d, "tasks-p1", []string{"p1"}, 5, 12, inP1)
		ctx := context.Background()
		res, err := r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s := sectionOf(t, res, "tasks-p1"); s.Commits != 5 {
			t.Fatalf("first window: %d commits, want 5", s.Commits)
		}
		waitReadAhead(t, e, 1)
		_, used0 := readAheadCounts(t, e)
		p := e.partitionState()
		if _, err := e.store.PruneThrough(ctx, e2ePartition, p.LogEpoch, p.MaxCommitSeq); err != nil {
			t.Fatal(err)
		}
		res, err = r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := sectionOf(t, res, "tasks-p1")
		if s.Status != wire.SubReset || s.Reason != syncerr.CodeCursorExpired || s.Commits != 0 {
			t.Fatalf("after pruning: status %s reason %q commits %d; want reset, %s, 0", s.Status, s.Reason, s.Commits, syncerr.CodeCursorExpired)
		}
		if _, used := readAheadCounts(t, e); used != used0 {
			t.Fatalf("a window read ahead was used after the horizon passed the cursor (used %v -> %v)", used0, used)
		}
		syncQuiet(t, r)
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), e.serverRows("tasks"))
	})
}

// A window read ahead under the client's scopes is not served after its
// scopes narrowed: the next request reads the window under the narrowed
// scopes, and no row of the revoked project reaches the client after the
// narrowing.
func TestE2EReadAheadNotAfterNarrowing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		alternate := func(i int) string { return []string{"p1", "p2"}[i%2] }
		e, _, r := readAheadPair(t, d, "tasks", []string{"p1", "p2"}, 4, 16, alternate)
		ctx := context.Background()
		res, err := r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s := sectionOf(t, res, "tasks"); s.Commits != 4 {
			t.Fatalf("first window: %d commits, want 4", s.Commits)
		}
		waitReadAhead(t, e, 1)
		_, used0 := readAheadCounts(t, e)
		e.allow("reader", map[string][]string{"project_id": {"p1"}})
		res, err = r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := sectionOf(t, res, "tasks")
		if s.Status != wire.SubActive || len(s.Effective) != 1 || len(s.Effective[0].Values) != 1 || s.Effective[0].Values[0] != "p1" {
			t.Fatalf("after narrowing: status %s effective %v; want active, project_id [p1]", s.Status, s.Effective)
		}
		noLaterP2 := func(when string) {
			t.Helper()
			for id, row := range clientRows(t, r, "tasks") {
				var n int
				if _, err := fmt.Sscanf(id, "t%03d", &n); err == nil && n >= 4 && alternate(n) == "p2" {
					t.Fatalf("%s the reader holds %s of the revoked project p2, pushed after its first window: %s", when, id, row)
				}
			}
		}
		noLaterP2("after the narrowed window")
		if _, used := readAheadCounts(t, e); used != used0 {
			t.Fatalf("the window read ahead under the old scopes was used (used %v -> %v)", used0, used)
		}
		syncQuiet(t, r)
		noLaterP2("caught up,")
	})
}

// A window read ahead is not served across a log-epoch rotation: the next
// request is answered with the epoch reset.
func TestE2EReadAheadNotAcrossEpochs(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, _, r := readAheadPair(t, d, "tasks-p1", []string{"p1"}, 5, 12, inP1)
		ctx := context.Background()
		if _, err := r.Round(ctx); err != nil {
			t.Fatal(err)
		}
		waitReadAhead(t, e, 1)
		_, used0 := readAheadCounts(t, e)
		if err := e.store.RotateLogEpoch(ctx, e2ePartition, "epoch-after-restore", time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		res, err := r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !res.ResetRequired || len(res.Sections) != 0 {
			t.Fatalf("after the rotation: reset %v, %d sections; want the epoch reset alone", res.ResetRequired, len(res.Sections))
		}
		if _, used := readAheadCounts(t, e); used != used0 {
			t.Fatalf("a window of the old epoch was used (used %v -> %v)", used0, used)
		}
	})
}

// waitReadAhead waits until at least n windows were read ahead.
func waitReadAhead(t *testing.T, e *metricsEnv, n float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if read, _ := readAheadCounts(t, e); read >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no window was read ahead")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stateHooks watch a store's request state reads and hold its bulk
// window reads (a catch-up's read-ahead) back: rechecks counts the reads
// of the partition and serve gate without a client record (the recheck
// after a window), entered is called after each request entry's read (a
// client's), and beforeBulk runs before a bulk window is read.
type stateHooks struct {
	rechecks   atomic.Int64
	entered    func()
	beforeBulk func(ctx context.Context)
}

func (h *stateHooks) state(clientID string) {
	if clientID == "" {
		h.rechecks.Add(1)
	} else if h.entered != nil {
		h.entered()
	}
}

func (h *stateHooks) window(ctx context.Context, q store.CommitWindowQuery) {
	if q.Bulk && h.beforeBulk != nil {
		h.beforeBulk(ctx)
	}
}

// hookedSQLite and hookedPostgres are the drivers' stores with hooks;
// every other method (and optional interface) is the store's own.
type hookedSQLite struct {
	*sqlitestore.Store
	h *stateHooks
}

func (s *hookedSQLite) ReadRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	st, err := s.Store.ReadRequestState(ctx, partition, clientID, running)
	s.h.state(clientID)
	return st, err
}

func (s *hookedSQLite) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	s.h.window(ctx, q)
	return s.Store.ReadCommitWindow(ctx, partition, q)
}

type hookedPostgres struct {
	*pgstore.Store
	h *stateHooks
}

func (s *hookedPostgres) ReadRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	st, err := s.Store.ReadRequestState(ctx, partition, clientID, running)
	s.h.state(clientID)
	return st, err
}

func (s *hookedPostgres) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	s.h.window(ctx, q)
	return s.Store.ReadCommitWindow(ctx, partition, q)
}

// hooked is the driver d with h on its stores.
func hooked(d e2eDriver, h *stateHooks) e2eDriver {
	return e2eDriver{name: d.name, open: func(t *testing.T) store.Store {
		switch s := d.open(t).(type) {
		case *sqlitestore.Store:
			return &hookedSQLite{Store: s, h: h}
		case *pgstore.Store:
			return &hookedPostgres{Store: s, h: h}
		default:
			t.Fatalf("no hooks for %T", s)
			return nil
		}
	}}
}

// A window read ahead that ends after the next request's entry (held back
// here until the request is waiting for it) carries the partition and the
// serve gate read after its rows: the request serves it without reading
// them again (no recheck), and the catch-up is whole.
func TestE2EReadAheadStateAfterRows(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		h := &stateHooks{}
		e, _, r := readAheadPair(t, hooked(d, h), "tasks-p1", []string{"p1"}, 5, 23, inP1)
		var waiting atomic.Bool
		h.entered = func() { waiting.Store(true) }
		h.beforeBulk = func(ctx context.Context) {
			// Until the client's next request entered (or a while).
			for end := time.Now().Add(2 * time.Second); !waiting.Load() && time.Now().Before(end) && ctx.Err() == nil; {
				time.Sleep(time.Millisecond)
			}
		}
		// The windows of 5 commits: the first read by its request, the
		// next four read ahead. (The empty pull after them may recheck:
		// a store need not read the state after no rows.)
		rechecks0 := h.rechecks.Load()
		got := 0
		for round := 0; round < 5; round++ {
			waiting.Store(false)
			res, err := r.Round(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := sectionOf(t, res, "tasks-p1")
			if want := min(5, 23-got); s.Status != wire.SubActive || s.Commits != want {
				t.Fatalf("round %d: status %s, %d commits; want active, %d", round, s.Status, s.Commits, want)
			}
			got += s.Commits
		}
		rechecks := h.rechecks.Load() - rechecks0
		syncQuiet(t, r)
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), e.serverRows("tasks"))
		if _, used := readAheadCounts(t, e); used < 4 {
			t.Fatalf("%v windows read ahead were used, want at least 4", used)
		}
		if rechecks != 0 {
			t.Fatalf("%d rechecks of the partition after windows read ahead, want none (their state was read after their rows)", rechecks)
		}
	})
}

// A prune that lands after the next request's entry but before the window
// read ahead for it reads its rows: the state read after those rows shows
// the horizon past the cursor, and the request answers reset
// (sync.cursor_expired), never the window with the pruned commits
// missing.
func TestE2EReadAheadPruneAfterEntry(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		h := &stateHooks{}
		e, _, r := readAheadPair(t, hooked(d, h), "tasks-p1", []string{"p1"}, 5, 12, inP1)
		ctx := context.Background()
		entered := make(chan struct{}, 1)
		var armed atomic.Bool
		h.entered = func() {
			if armed.Load() {
				select {
				case entered <- struct{}{}:
				default:
				}
			}
		}
		pruned := make(chan error, 1)
		h.beforeBulk = func(ctx context.Context) {
			if !armed.Load() {
				return
			}
			select {
			case <-entered:
			case <-ctx.Done():
				pruned <- ctx.Err()
				return
			}
			p, err := e.store.Partition(ctx, e2ePartition)
			if err == nil {
				_, err = e.store.PruneThrough(ctx, e2ePartition, p.LogEpoch, p.MaxCommitSeq)
			}
			pruned <- err
		}
		armed.Store(true)
		res, err := r.Round(ctx) // the first window; the second is read ahead, held back
		if err != nil {
			t.Fatal(err)
		}
		if s := sectionOf(t, res, "tasks-p1"); s.Commits != 5 {
			t.Fatalf("first window: %d commits, want 5", s.Commits)
		}
		res, err = r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		armed.Store(false)
		select {
		case err := <-pruned:
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the window read ahead never ran")
		}
		s := sectionOf(t, res, "tasks-p1")
		if s.Status != wire.SubReset || s.Reason != syncerr.CodeCursorExpired || s.Commits != 0 {
			t.Fatalf("pruned after the entry: status %s reason %q commits %d; want reset, %s, 0", s.Status, s.Reason, s.Commits, syncerr.CodeCursorExpired)
		}
	})
}
