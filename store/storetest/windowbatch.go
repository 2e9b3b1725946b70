package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunWindowBatch checks store.CommitWindowBatcher, for a store that
// implements it: every window of a batch is the window ReadCommitWindow
// reads for its query (the same commits and changes, the same
// completeness), short and long ranges, several scope values, a change
// limit that cuts, a range that spans no commit, and with StateAfter each
// window carries the partition read after the rows.
func RunWindowBatch(t *testing.T, open Opener) {
	e := newEnv(t, open)
	wb, ok := e.s.(store.CommitWindowBatcher)
	if !ok {
		t.Skipf("%T reads its windows one by one", e.s)
	}
	e.touch("p1")
	const commits = 200
	for i := 1; i <= commits; i++ {
		project := fmt.Sprintf("w%d", i%4)
		if i <= 60 {
			project = "early"
		}
		e.upsert("p1", Task{ID: fmt.Sprintf("r%d", i), ProjectID: project}.RowWrite(t, 1))
	}
	q := func(after int64, limit int, values ...string) store.CommitWindowQuery {
		return store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope(values...), AfterSeq: after, ThroughSeq: commits,
			LimitChanges: limit, WireOnly: true, StateAfter: true, Running: 1}
	}
	qs := []store.CommitWindowQuery{
		q(100, 1000, "w0"),
		q(150, 1000, "w1", "w2"),
		q(commits, 1000, "w3"), // caught up: spans no commit
		q(80, 5, "w3"),         // cut by its change limit
		q(120, 1000, "nobody"),
		q(0, 1000, "early"), // the whole log
		q(0, 1000, "early", "w0"),
	}
	changes := func(w store.CommitWindow) []string {
		var out []string
		for _, c := range w.Commits {
			for _, ch := range c.Changes {
				out = append(out, fmt.Sprintf("%d/%s", c.Seq, ch.RowID))
			}
		}
		return out
	}
	got, err := wb.ReadCommitWindows(e.ctx, "p1", qs)
	if err != nil {
		t.Fatalf("ReadCommitWindows: %v", err)
	}
	if len(got) != len(qs) {
		t.Fatalf("%d windows for %d queries", len(got), len(qs))
	}
	for i, q := range qs {
		want, err := e.s.ReadCommitWindow(e.ctx, "p1", q)
		if err != nil {
			t.Fatalf("ReadCommitWindow: %v", err)
		}
		if !slices.Equal(changes(got[i]), changes(want)) || got[i].Complete != want.Complete {
			t.Errorf("query %d: %v complete %v; ReadCommitWindow: %v complete %v", i, changes(got[i]), got[i].Complete,
				changes(want), want.Complete)
		}
		if got[i].State == nil || got[i].State.Partition.MaxCommitSeq != commits {
			t.Errorf("query %d: state %+v, want the partition read after the rows", i, got[i].State)
		}
	}
	if n := len(changes(got[3])); n != 5 || got[3].Complete {
		t.Errorf("the limited window holds %d changes, complete %v; want 5, incomplete", n, got[3].Complete)
	}
}
