package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunScopes tests the scope filters of ReadCommitWindow and ScanRows: a
// few cases written out, then a property test against a reference model.
func RunScopes(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"RequiresScope", testScopeRequired},
		{"TableFilter", testScopeTableFilter},
		{"VariableNotValue", testScopeVariableNotValue},
		{"RowMoves", testScopeRowMoves},
		{"BytewiseRowOrder", testScopeBytewiseOrder},
		{"LimitKeepsCommitsWhole", testScopeLimitWholeCommits},
		{"EmptyWindow", testScopeEmptyWindow},
		{"Property", testScopeProperty},
	})
}

func testScopeRequired(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.upsert("p1", Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1))
	for _, scopes := range []wire.ScopeMap{nil, {}} {
		if w, err := e.s.ReadCommitWindow(e.ctx, "p1", store.CommitWindowQuery{Table: TableTasks, Scopes: scopes, ThroughSeq: 1}); !errors.Is(err, store.ErrScanRequiresScope) {
			t.Errorf("ReadCommitWindow(scopes %#v) = %s, %v; want ErrScanRequiresScope", scopes, fmtCommits(w.Commits), err)
		}
		if rows, err := e.s.ScanRows(e.ctx, "p1", store.RowScanQuery{Table: TableTasks, Scopes: scopes, Limit: 10}); !errors.Is(err, store.ErrScanRequiresScope) {
			t.Errorf("ScanRows(scopes %#v) = %s, %v; want ErrScanRequiresScope", scopes, fmtRows(rows), err)
		}
		if ids, err := e.s.PageBoundaries(e.ctx, "p1", store.RowScanQuery{Table: TableTasks, Scopes: scopes, Limit: 10}, 5); !errors.Is(err, store.ErrScanRequiresScope) {
			t.Errorf("PageBoundaries(scopes %#v) = %q, %v; want ErrScanRequiresScope", scopes, ids, err)
		}
	}
}

// scopeFixture applies commits of row writes and deletes to p1 and keeps
// the model in step.
type scopeFixture struct {
	*env
	m *logModel
}

func newScopeFixture(t *testing.T, open Opener) *scopeFixture {
	e := newEnv(t, open)
	e.touch("p1")
	return &scopeFixture{env: e, m: newLogModel()}
}

// commit applies one commit: upserts of writes, then deletes of the
// current rows named by deletes.
func (f *scopeFixture) commit(writes []store.RowWrite, deletes ...rowKey) int64 {
	f.t.Helper()
	var changes []store.Change
	for _, w := range writes {
		changes = append(changes, UpsertChange(w))
	}
	for _, k := range deletes {
		r, ok := f.m.rows[k]
		if !ok {
			f.t.Fatalf("delete of absent row %v", k)
		}
		changes = append(changes, DeleteChange(r))
	}
	c := newCommit(changes...)
	var seq int64
	f.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		for _, w := range writes {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
		}
		for _, k := range deletes {
			if err := tx.DeleteRow(ctx, k.table, k.id); err != nil {
				return err
			}
		}
		var err error
		seq, err = tx.AppendCommit(ctx, c)
		return err
	})
	f.m.apply(store.Commit{Seq: seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, ClientID: c.ClientID, ClientCommitID: c.ClientCommitID, Changes: changes}, writes)
	return seq
}

// check compares every window and scan of the query with the model, with
// and without limits.
func (f *scopeFixture) check(table string, scopes wire.ScopeMap) {
	f.t.Helper()
	through := int64(len(f.m.commits)) + f.m.horizon
	for _, limit := range []int{0, 1, 2, 3} {
		f.checkWindow(f.m, table, scopes, f.m.horizon, through, limit)
		f.checkScan(f.m, table, scopes, limit+1)
	}
}

// note returns the write of a note at version 1.
func (f *scopeFixture) note(id, project, team string) store.RowWrite {
	f.t.Helper()
	return Note{ID: id, ProjectID: project, TeamID: team}.RowWrite(f.t, 1)
}

// wantWindow checks one answer of ReadCommitWindow.
func (f *scopeFixture) wantWindow(q store.CommitWindowQuery, wantSeqs []int64, wantComplete bool) {
	f.t.Helper()
	w, err := f.s.ReadCommitWindow(f.ctx, "p1", q)
	if err != nil {
		f.t.Fatalf("ReadCommitWindow(%+v): %v", q, err)
	}
	if got := seqs(w.Commits); !slices.Equal(got, wantSeqs) || w.Complete != wantComplete {
		f.t.Errorf("ReadCommitWindow(%s (%d, %d], limit %d) = %v complete %t, want %v complete %t",
			fmtScopeMap(q.Scopes), q.AfterSeq, q.ThroughSeq, q.LimitChanges, got, w.Complete, wantSeqs, wantComplete)
	}
}

// wantScan checks the ids of all rows of a scan.
func (f *scopeFixture) wantScan(table string, scopes wire.ScopeMap, wantIDs ...string) {
	f.t.Helper()
	if got := rowIDs(f.scan("p1", table, scopes)); !slices.Equal(got, wantIDs) {
		f.t.Errorf("scan %s of %s = %q, want %q", fmtScopeMap(scopes), table, got, wantIDs)
	}
}

func testScopeTableFilter(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	t1 := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	t2 := Task{ID: "t2", ProjectID: "p2"}.RowWrite(t, 1)
	f.commit([]store.RowWrite{t1, f.note("n1", "p1", "tA")})
	f.commit([]store.RowWrite{f.note("n2", "p1", "tA")})
	f.commit([]store.RowWrite{t2})
	f.wantWindow(store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: 3}, []int64{1}, true)
	f.wantWindow(store.CommitWindowQuery{Table: TableNotes, Scopes: projectScope("p1"), ThroughSeq: 3}, []int64{1, 2}, true)
	f.wantScan(TableTasks, projectScope("p1"), "t1")
	f.wantScan(TableNotes, projectScope("p1"), "n1", "n2")
	f.check(TableTasks, projectScope("p1", "p2"))
	f.check(TableNotes, projectScope("p1"))
}

func testScopeVariableNotValue(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	f.commit([]store.RowWrite{f.note("n1", "x", "y")})
	f.commit([]store.RowWrite{f.note("n2", "y", "x")})
	tests := []struct {
		scopes wire.ScopeMap
		want   []string
	}{
		{wire.ScopeMap{{Key: VarTeam, Values: []string{"x"}}}, []string{"n2"}},
		{wire.ScopeMap{{Key: VarProject, Values: []string{"x"}}}, []string{"n1"}},
		{wire.ScopeMap{{Key: VarProject, Values: []string{"x"}}, {Key: VarTeam, Values: []string{"x"}}}, nil},
		{wire.ScopeMap{{Key: VarProject, Values: []string{"x", "y"}}, {Key: VarTeam, Values: []string{"x"}}}, []string{"n2"}},
		{wire.ScopeMap{{Key: "org_id", Values: []string{"x", "y"}}}, nil},
	}
	for _, tt := range tests {
		f.wantScan(TableNotes, tt.scopes, tt.want...)
		f.check(TableNotes, tt.scopes)
	}
}

func testScopeRowMoves(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	f.commit([]store.RowWrite{f.note("n1", "p1", "tA")})
	f.commit([]store.RowWrite{f.note("n1", "p2", "tA")})
	f.wantScan(TableNotes, projectScope("p1"))
	f.wantScan(TableNotes, projectScope("p2"), "n1")
	f.commit(nil, rowKey{TableNotes, "n1"})
	f.wantScan(TableNotes, projectScope("p2"))
	f.wantWindow(store.CommitWindowQuery{Table: TableNotes, Scopes: projectScope("p1"), ThroughSeq: 3}, []int64{1}, true)
	f.wantWindow(store.CommitWindowQuery{Table: TableNotes, Scopes: projectScope("p2"), ThroughSeq: 3}, []int64{2, 3}, true)
	for _, p := range []string{"p1", "p2"} {
		f.check(TableNotes, projectScope(p))
	}
}

func testScopeBytewiseOrder(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	want := []string{" ", "10", "9", "A", "B", "Z", "a", "a-", "a0", "b", "é", "\uE000", "\U0001F600"}
	var writes []store.RowWrite
	for _, i := range []int{7, 3, 12, 0, 9, 5, 1, 11, 4, 8, 2, 10, 6} {
		writes = append(writes, f.note(want[i], "p1", "t1"))
	}
	f.commit(writes)
	f.wantScan(TableNotes, projectScope("p1"), want...)
	for limit := range 5 {
		f.checkScan(f.m, TableNotes, projectScope("p1"), limit+1)
	}
}

func testScopeLimitWholeCommits(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	batch := func(ids ...string) []store.RowWrite {
		var out []store.RowWrite
		for _, id := range ids {
			out = append(out, f.note(id, "p1", "t1"))
		}
		return out
	}
	f.commit(batch("a", "b", "c", "d", "e")) // 1: five changes
	f.commit(batch("f"))                     // 2
	f.commit(batch("g", "h"))                // 3
	f.commit(batch("i"))                     // 4
	tests := []struct {
		after        int64
		limit        int
		want         []int64
		wantComplete bool
	}{
		{0, 2, []int64{1}, false},
		{0, 5, []int64{1}, false},
		{1, 2, []int64{2}, false},
		{1, 3, []int64{2, 3}, false},
		{2, 2, []int64{3}, false},
		{3, 2, []int64{4}, true},
		{1, 4, []int64{2, 3, 4}, true},
		{0, 0, []int64{1, 2, 3, 4}, true},
		{0, -1, []int64{1, 2, 3, 4}, true},
		{0, 100, []int64{1, 2, 3, 4}, true},
	}
	for _, tt := range tests {
		f.wantWindow(store.CommitWindowQuery{Table: TableNotes, Scopes: projectScope("p1"), AfterSeq: tt.after, ThroughSeq: 4, LimitChanges: tt.limit}, tt.want, tt.wantComplete)
	}
	f.check(TableNotes, projectScope("p1"))
}

func testScopeEmptyWindow(t *testing.T, open Opener) {
	f := newScopeFixture(t, open)
	for _, id := range []string{"a", "b", "c"} {
		f.commit([]store.RowWrite{f.note(id, "p1", "t1")})
	}
	for _, w := range []struct{ after, through int64 }{{0, 0}, {2, 2}, {3, 3}, {3, 10}, {5, 10}} {
		for _, limit := range []int{0, 1} {
			f.wantWindow(store.CommitWindowQuery{Table: TableNotes, Scopes: projectScope("p1"), AfterSeq: w.after, ThroughSeq: w.through, LimitChanges: limit}, nil, true)
		}
	}
}
