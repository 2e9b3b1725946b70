package sqlitestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// TestWindowSharedEqualsAlone: short window reads asked at the same time,
// answered by shared reads of their ranges' union for the union of their
// scope values (window_share.go), get what each read alone gets: the
// commits of its own range with only the changes of its own scopes, cut
// at its own change limit, the same completeness and the state after,
// over a log with commits of another partition in between, commits with
// changes in two scopes, deletes and a pruned commit.
func TestWindowSharedEqualsAlone(t *testing.T) {
	s, sc := openFixture(t)
	ctx := t.Context()
	const p = "p1"
	through := mixedLog(t, s)
	// A commit whose row is gone (pruned): no read returns it.
	if err := s.ExecRaw(ctx, fmt.Sprintf(`DELETE FROM sync_commits WHERE partition='p1' AND commit_seq=%d`, through-9)); err != nil {
		t.Fatal(err)
	}
	scope := func(values ...string) wire.ScopeMap {
		return wire.ScopeMap{{Key: "project_id", Values: values}}
	}
	asks := storetest.WindowAsks(t, storetest.TableTasks, []wire.ScopeMap{scope("a"), scope("b"), scope("a", "c"), scope("zz")}, through, 3, sc.Version(),
		func(q store.CommitWindowQuery) (store.CommitWindow, error) { return s.readCommitWindow(ctx, p, q) })
	storetest.CheckSharedWindows(t, asks, func(ctx context.Context, q store.CommitWindowQuery) (store.CommitWindow, error) {
		return s.ReadCommitWindow(ctx, p, q)
	}, s.sharedAnswers.Load)
}
