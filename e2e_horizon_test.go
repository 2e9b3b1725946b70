package syncgo_test

import (
	"context"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// A cursor behind the horizon resets and re-bootstraps (§4.6, §5.6): the
// log is pruned past a reader's cursor, including a delete the reader never
// saw; its next pull answers SUB_START reset with sync.cursor_expired and no
// commits, the reader keeps its rows until the fresh bootstrap's first page
// clears its scope, and it converges without the deleted row.
func TestE2ECursorBehindHorizonResets(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		r := e.client("reader", sspclient.Options{})
		mustSubscribe(t, w, "tasks-p1", "p1")
		mustSubscribe(t, r, "tasks-p1", "p1")
		for _, id := range []string{"t1", "t2", "t3"} {
			mustUpsert(t, w, taskRow(id, "p1", id))
		}
		syncQuiet(t, w)
		syncQuiet(t, r)
		before, _ := r.Subscription("tasks-p1")

		if _, err := w.Delete("tasks", "t2"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, w, map[string]any{"id": "t1", "title": "renamed"})
		mustUpsert(t, w, taskRow("t4", "p1", "t4"))
		syncQuiet(t, w)

		p := e.partitionState()
		pr, err := e.store.PruneThrough(context.Background(), e2ePartition, p.LogEpoch, p.MaxCommitSeq)
		if err != nil {
			t.Fatalf("PruneThrough: %v", err)
		}
		if pr.HorizonSeq <= before.Cursor {
			t.Fatalf("horizon %d is not past the reader's cursor %d", pr.HorizonSeq, before.Cursor)
		}

		res, err := r.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s := sectionOf(t, res, "tasks-p1")
		if s.Status != wire.SubReset || s.Reason != syncerr.CodeCursorExpired || s.Commits != 0 || s.NextCursor != before.Cursor {
			t.Fatalf("section after pruning: status %s reason %q commits %d nextCursor %d; want reset, %s, 0, %d",
				s.Status, s.Reason, s.Commits, s.NextCursor, syncerr.CodeCursorExpired, before.Cursor)
		}
		st, _ := r.Subscription("tasks-p1")
		if st.Cursor != -1 || st.BootstrapState != nil {
			t.Fatalf("after the reset the cursor is %d (token %v), want -1 and none", st.Cursor, st.BootstrapState)
		}
		if _, ok := r.Row("tasks", "t2"); !ok {
			t.Fatal("the reset purged rows; only the bootstrap may replace them")
		}

		rounds := syncQuiet(t, r)
		if s := sectionOf(t, rounds[0], "tasks-p1"); !s.Bootstrap || s.Purged != 3 {
			t.Fatalf("the round after the reset: bootstrap %v, purged %d; want a fresh bootstrap clearing the 3 old rows", s.Bootstrap, s.Purged)
		}
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), e.serverRows("tasks"))
		if _, ok := r.Row("tasks", "t2"); ok {
			t.Fatal("the reader still holds t2, deleted behind the horizon")
		}
	})
}
