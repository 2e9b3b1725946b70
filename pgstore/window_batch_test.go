package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// ReadCommitWindows answers every query as ReadCommitWindow does (the
// same commits and changes, the same completeness), and reads the short
// and empty windows of a pull, with the state after them, in one round
// trip; a long window is read by ReadCommitWindow after them. Fails when
// the batch answers a query differently from the single read, or when
// its short windows take a round trip each.
func TestReadCommitWindows(t *testing.T) {
	ctx := context.Background()
	s, rt := openCounted(t, 1) // one connection: every statement prepared on it by the checks
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	const commits = 200 // past shortWindowCommits
	for i := 1; i <= commits; i++ {
		project := fmt.Sprintf("p%d", i%4)
		if i <= 60 {
			project = "long" // a scope whose window spans the whole log
		}
		if _, _, err := enginePush(ctx, s, "p", fmt.Sprintf("c%d", i), fixtureTask(t, fmt.Sprintf("r%d", i), project, "x")); err != nil {
			t.Fatal(err)
		}
	}
	scope := func(v ...string) wire.ScopeMap { return wire.ScopeMap{{Key: storetest.VarProject, Values: v}} }
	q := func(after int64, limit int, v ...string) store.CommitWindowQuery {
		return store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: scope(v...), AfterSeq: after, ThroughSeq: commits,
			LimitChanges: limit, WireOnly: true, StateAfter: true, Running: 1}
	}
	short := []store.CommitWindowQuery{
		q(100, 1000, "p0"),
		q(150, 1000, "p1", "p2"),
		q(commits, 1000, "p3"), // caught up: spans no commit
		q(80, 5, "p3"),         // cut by its change limit
		q(120, 1000, "nobody"),
	}
	seqs := func(w store.CommitWindow) []string {
		var out []string
		for _, c := range w.Commits {
			for _, ch := range c.Changes {
				out = append(out, fmt.Sprintf("%d/%s", c.Seq, ch.RowID))
			}
		}
		return out
	}
	check := func(qs []store.CommitWindowQuery) {
		t.Helper()
		got, err := s.ReadCommitWindows(ctx, "p", qs)
		if err != nil {
			t.Fatal(err)
		}
		for i, q := range qs {
			want, err := s.ReadCommitWindow(ctx, "p", q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seqs(got[i]), seqs(want)) || got[i].Complete != want.Complete {
				t.Fatalf("query %d: %v complete %v; ReadCommitWindow: %v complete %v", i, seqs(got[i]), got[i].Complete,
					seqs(want), want.Complete)
			}
			if got[i].State == nil || got[i].State.Partition.MaxCommitSeq != commits {
				t.Fatalf("query %d: state %+v, want one read after the rows", i, got[i].State)
			}
		}
	}
	check(short)
	check(append(slices.Clone(short), q(0, 1000, "long")))
	before := rt.n.Load()
	if _, err := s.ReadCommitWindows(ctx, "p", short); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 1 {
		t.Fatalf("%d short windows took %d round trips; want 1", len(short), n)
	}
}
