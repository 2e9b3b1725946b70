package syncgo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// catchUpEnv is a server that bootstraps a pull more than 20 commits
// behind again, with a writer and a reader of project p1 (limitCommits
// 10) in sync over three rows.
func catchUpEnv(t *testing.T, d e2eDriver, after int64) (e *e2eEnv, w, r *sspclient.Client, cursor int64) {
	t.Helper()
	e = newE2EEnv(t, d, func(c *syncgo.Config) { c.Limits.CatchUpBootstrapAfter = after })
	w = e.client("writer", sspclient.Options{})
	r = e.client("reader", sspclient.Options{LimitCommits: 10})
	mustSubscribe(t, w, "tasks-w", "p1", "p2")
	mustSubscribe(t, r, "tasks-p1", "p1")
	for _, id := range []string{"t1", "t2", "t3"} {
		mustUpsert(t, w, taskRow(id, "p1", id))
	}
	syncQuiet(t, w)
	syncQuiet(t, r)
	st, _ := r.Subscription("tasks-p1")
	return e, w, r, st.Cursor
}

// otherCommits pushes n one-row commits to project p2, outside the
// reader's scope.
func otherCommits(t *testing.T, w *sspclient.Client, n int) {
	t.Helper()
	for i := range n {
		mustUpsert(t, w, taskRow(fmt.Sprintf("o%d", i), "p2", "other"))
		if _, err := w.Push(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Catch-up by segments (§8.4): a reader far behind, whose scope is small
// beside the gap, is answered reset (§4.6's section) instead of the
// replay of the log, keeps its rows until the fresh bootstrap's first
// page clears its scope (§5.6), and converges without the row deleted in
// the gap, in fewer rounds than the replay would take.
func TestE2ECatchUpFarBehindBootstraps(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e, w, r, before := catchUpEnv(t, d, 20)
		if _, err := w.Delete("tasks", "t2"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, w, map[string]any{"id": "t1", "title": "renamed"})
		mustUpsert(t, w, taskRow("t4", "p1", "t4"))
		syncQuiet(t, w)
		otherCommits(t, w, 40)
		if gap := e.partitionState().MaxCommitSeq - before; gap <= 20 {
			t.Fatalf("gap %d, want more than 20", gap)
		}

		res, err := r.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s := sectionOf(t, res, "tasks-p1")
		if s.Status != wire.SubReset || s.Reason != syncerr.CodeCursorExpired || s.Commits != 0 || s.NextCursor != before {
			t.Fatalf("a pull far behind: status %s reason %q commits %d nextCursor %d; want reset, %s, 0, %d",
				s.Status, s.Reason, s.Commits, s.NextCursor, syncerr.CodeCursorExpired, before)
		}
		if _, ok := r.Row("tasks", "t2"); !ok {
			t.Fatal("the reset purged rows; only the bootstrap may replace them")
		}
		rounds := syncQuiet(t, r)
		if s := sectionOf(t, rounds[0], "tasks-p1"); !s.Bootstrap || s.Purged != 3 || s.Commits != 0 {
			t.Fatalf("the round after the reset: bootstrap %v, purged %d, commits %d; want a fresh bootstrap clearing the 3 old rows",
				s.Bootstrap, s.Purged, s.Commits)
		}
		if len(rounds) > 2 {
			t.Fatalf("the catch-up took %d rounds after the reset, want at most 2 (a replay takes 5)", len(rounds))
		}
		sameRows(t, "reader vs server", clientRows(t, r, "tasks"), serverRowsOf(e, "t"))
		if _, ok := r.Row("tasks", "t2"); ok {
			t.Fatal("the reader still holds t2, deleted in the gap")
		}

		// Caught up: the next commit in scope is an ordinary replay.
		mustUpsert(t, w, taskRow("t5", "p1", "t5"))
		syncQuiet(t, w)
		res, err = r.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := sectionOf(t, res, "tasks-p1"); s.Status != wire.SubActive || s.Bootstrap || s.Commits != 1 {
			t.Fatalf("the pull after the catch-up: status %s bootstrap %v commits %d; want one commit replayed", s.Status, s.Bootstrap, s.Commits)
		}
	})
}

// The log is replayed, not reset, when the gap is within the limit, when
// nothing changed in the scope after the cursor, when the scope holds more
// than half as many rows as the gap, and when the host turned it off.
func TestE2ECatchUpReplaysWhenCheaper(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		replays := func(t *testing.T, r *sspclient.Client, wantCommits bool) {
			t.Helper()
			res, err := r.Round(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := sectionOf(t, res, "tasks-p1")
			if s.Status != wire.SubActive || s.Bootstrap || (s.Commits > 0) != wantCommits {
				t.Fatalf("status %s bootstrap %v commits %d; want an active replay (commits: %v)", s.Status, s.Bootstrap, s.Commits, wantCommits)
			}
			syncQuiet(t, r)
		}
		t.Run("gap within the limit", func(t *testing.T) {
			_, w, r, _ := catchUpEnv(t, d, 20)
			mustUpsert(t, w, taskRow("t4", "p1", "t4"))
			otherCommits(t, w, 15)
			replays(t, r, true)
		})
		t.Run("no change in the scope", func(t *testing.T) {
			_, w, r, _ := catchUpEnv(t, d, 20)
			otherCommits(t, w, 40)
			replays(t, r, false)
		})
		t.Run("scope larger than half the gap", func(t *testing.T) {
			_, w, r, _ := catchUpEnv(t, d, 20)
			for i := range 30 {
				mustUpsert(t, w, taskRow(fmt.Sprintf("n%d", i), "p1", "new"))
				if _, err := w.Push(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			replays(t, r, true) // 33 rows, a gap of 30
		})
		t.Run("off", func(t *testing.T) {
			_, w, r, _ := catchUpEnv(t, d, -1)
			mustUpsert(t, w, taskRow("t4", "p1", "t4"))
			otherCommits(t, w, 40)
			replays(t, r, true)
		})
	})
}

// serverRowsOf is the server's tasks whose ids start with prefix (the
// tests' p1 rows are t…, their p2 rows o…).
func serverRowsOf(e *e2eEnv, prefix string) map[string]string {
	out := e.serverRows("tasks")
	for id := range out {
		if !strings.HasPrefix(id, prefix) {
			delete(out, id)
		}
	}
	return out
}
