package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunAppend tests AppendCommit: dense per-partition sequences under
// concurrency, rollback, and the commit as read back.
func RunAppend(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"ConcurrentDense", testAppendConcurrentDense},
		{"RollbackConsumesNoSeq", testAppendRollback},
		{"IndependentPartitions", testAppendIndependentPartitions},
		{"TwoCommitsInOneWrite", testAppendTwoInOneWrite},
		{"RoundTrip", testAppendRoundTrip},
		{"WireOnlyWindow", testAppendWireOnlyWindow},
	})
}

func projectScope(values ...string) wire.ScopeMap {
	return wire.ScopeMap{{Key: VarProject, Values: values}}
}

// appendConcurrently runs writers goroutines that each append perWriter
// commits of one task change to the partition, and returns the client
// commit id of every sequence it was given.
func appendConcurrently(t *testing.T, s store.Store, partition string, writers, perWriter int, w store.RowWrite) map[int64]string {
	t.Helper()
	var (
		mu    sync.Mutex
		byseq = make(map[int64]string)
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for range writers {
		wg.Go(func() {
			<-start
			for range perWriter {
				c := newCommit(UpsertChange(w))
				var seq int64
				err := s.Write(t.Context(), partition, func(ctx context.Context, tx store.WriteTx) error {
					var err error
					seq, err = tx.AppendCommit(ctx, c)
					return err
				})
				if err != nil {
					t.Errorf("Write(%q): %v", partition, err)
					return
				}
				mu.Lock()
				if prev, dup := byseq[seq]; dup {
					t.Errorf("sequence %d of %q given to commits %q and %q", seq, partition, prev, c.ClientCommitID)
				}
				byseq[seq] = c.ClientCommitID
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return byseq
}

// wantDenseLog checks that the partition's log holds exactly the commits
// of byseq, at sequences 1..n.
func (e *env) wantDenseLog(partition string, byseq map[int64]string, n int64, scopes wire.ScopeMap) {
	e.t.Helper()
	got := slices.Sorted(func(yield func(int64) bool) {
		for s := range byseq {
			if !yield(s) {
				return
			}
		}
	})
	if want := seqRange(1, n); !slices.Equal(got, want) {
		e.t.Errorf("%q: sequences handed out = %v, want 1..%d", partition, got, n)
	}
	if p := e.partition(partition); p.MaxCommitSeq != n {
		e.t.Errorf("%q: MaxCommitSeq = %d, want %d", partition, p.MaxCommitSeq, n)
	}
	commits := e.window(partition, store.CommitWindowQuery{Table: TableTasks, Scopes: scopes, ThroughSeq: n})
	if want := seqRange(1, n); !slices.Equal(seqs(commits), want) {
		e.t.Errorf("%q: window sequences = %v, want 1..%d", partition, seqs(commits), n)
	}
	for _, c := range commits {
		if id := byseq[c.Seq]; c.ClientCommitID != id {
			e.t.Errorf("%q: commit %d has clientCommitId %q, but AppendCommit returned %d for %q", partition, c.Seq, c.ClientCommitID, c.Seq, id)
		}
	}
}

func testAppendConcurrentDense(t *testing.T, open Opener) {
	const writers, perWriter = 16, 25
	e := newEnv(t, open)
	e.touch("p1")
	before := e.s.Stats()
	byseq := appendConcurrently(t, e.s, "p1", writers, perWriter, Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1))
	after := e.s.Stats()
	e.wantDenseLog("p1", byseq, writers*perWriter, projectScope("p1"))
	if got := after.Commits - before.Commits; got != writers*perWriter {
		t.Errorf("Stats().Commits grew by %d, want %d", got, writers*perWriter)
	}
	if got := after.Writes - before.Writes; got != writers*perWriter {
		t.Errorf("Stats().Writes grew by %d, want %d", got, writers*perWriter)
	}
	if got := after.Batches - before.Batches; got < 1 || got > writers*perWriter {
		t.Errorf("Stats().Batches grew by %d, want 1..%d", got, writers*perWriter)
	}
}

func testAppendRollback(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	if got := AppendCommit(t, e.s, "p1", UpsertChange(w)); got != 1 {
		t.Fatalf("first AppendCommit = %d, want 1", got)
	}
	err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		seq, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
		if err != nil {
			return err
		}
		if seq != 2 {
			t.Errorf("AppendCommit in the failing write = %d, want 2", seq)
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Write = %v, want the function's error", err)
	}
	if p := e.partition("p1"); p.MaxCommitSeq != 1 {
		t.Errorf("MaxCommitSeq after a rolled-back append = %d, want 1", p.MaxCommitSeq)
	}
	c := newCommit(UpsertChange(w))
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		seq, err := tx.AppendCommit(ctx, c)
		if err == nil && seq != 2 {
			t.Errorf("AppendCommit after a rolled-back append = %d, want 2", seq)
		}
		return err
	})
	commits := e.window("p1", store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: 10})
	if got := seqs(commits); !slices.Equal(got, []int64{1, 2}) || commits[1].ClientCommitID != c.ClientCommitID {
		t.Errorf("window = %s, want commits 1 and 2, 2 being %q", fmtCommits(commits), c.ClientCommitID)
	}
}

func testAppendIndependentPartitions(t *testing.T, open Opener) {
	const partitions, writers, perWriter = 4, 4, 10
	e := newEnv(t, open)
	w := Task{ID: "t1", ProjectID: "x"}.RowWrite(t, 1)
	var wg sync.WaitGroup
	logs := make([]map[int64]string, partitions)
	for i := range partitions {
		e.touch(fmt.Sprintf("p%d", i))
	}
	for i := range partitions {
		wg.Go(func() { logs[i] = appendConcurrently(t, e.s, fmt.Sprintf("p%d", i), writers, perWriter, w) })
	}
	wg.Wait()
	for i, byseq := range logs {
		e.wantDenseLog(fmt.Sprintf("p%d", i), byseq, writers*perWriter, projectScope("x"))
	}
}

func testAppendTwoInOneWrite(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	AppendCommit(t, e.s, "p1", UpsertChange(w))
	var got []int64
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		for range 2 {
			seq, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
			if err != nil {
				return err
			}
			got = append(got, seq)
		}
		return nil
	})
	if !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("two AppendCommit calls in one Write = %v, want [2 3]", got)
	}
}

func testAppendRoundTrip(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	task := Task{ID: "t1", ProjectID: "p1", Title: ptr("héllo"), N: ptr(int64(-42)), Blob: []byte{0, 1, 0xff}}.RowWrite(t, 7)
	gone := Task{ID: "t2", ProjectID: "p1"}.RowWrite(t, 3)
	note := Note{ID: "n1", ProjectID: "p1", TeamID: "t9", Body: ptr("body")}.RowWrite(t, 1)
	c := store.NewCommit{
		ClientID:       "client-x",
		ClientCommitID: "cc-round-trip",
		ActorID:        "actor-x",
		CreatedAtMs:    1_700_000_000_123,
		Changes:        []store.Change{UpsertChange(task), UpsertChange(note), DeleteChange(gone.Row)},
	}
	var seq int64
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		var err error
		seq, err = tx.AppendCommit(ctx, c)
		return err
	})
	commit := func(changes ...store.Change) store.Commit {
		return store.Commit{Seq: seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, ClientID: c.ClientID, ClientCommitID: c.ClientCommitID, Changes: changes}
	}
	tests := []struct {
		table string
		want  store.Commit
	}{
		{TableTasks, commit(c.Changes[0], c.Changes[2])},
		{TableNotes, commit(c.Changes[1])},
	}
	for _, tt := range tests {
		got := e.window("p1", store.CommitWindowQuery{Table: tt.table, Scopes: projectScope("p1"), ThroughSeq: seq})
		if len(got) != 1 || !sameCommit(got[0], tt.want) {
			t.Errorf("%s window = %s,\nwant [%s]", tt.table, fmtCommits(got), fmtCommit(tt.want))
		}
	}
}

// testAppendWireOnlyWindow: a WireOnly window holds the commits and
// changes of the window read without it, window by window, read by
// candidates and in bulk, at limits that cut it; only the commits' client
// ids may be left empty.
func testAppendWireOnlyWindow(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	var last int64
	for i := range 40 {
		w := Task{ID: fmt.Sprintf("t%02d", i), ProjectID: []string{"p1", "p1", "p2"}[i%3]}.RowWrite(t, 1)
		last = AppendCommit(t, e.s, "p1", UpsertChange(w))
	}
	for _, limit := range []int{0, 1, 7} {
		for _, bulk := range []bool{false, true} {
			q := store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: last, LimitChanges: limit, Bulk: bulk}
			for pages := 0; q.AfterSeq < last && pages < 50; pages++ {
				full, err := e.s.ReadCommitWindow(e.ctx, "p1", q)
				if err != nil {
					t.Fatal(err)
				}
				want := slices.Clone(full.Commits)
				q.WireOnly = true
				only, err := e.s.ReadCommitWindow(e.ctx, "p1", q)
				if err != nil {
					t.Fatal(err)
				}
				q.WireOnly = false
				got := slices.Clone(only.Commits)
				for i := range got {
					if i < len(want) && got[i].ClientID == "" && got[i].ClientCommitID == "" {
						got[i].ClientID, got[i].ClientCommitID = want[i].ClientID, want[i].ClientCommitID
					}
				}
				if len(got) != len(want) || only.Complete != full.Complete || !slices.EqualFunc(got, want, sameCommit) {
					t.Fatalf("limit %d bulk %v after %d: wire-only window %s (complete %v),\nwant %s (complete %v)",
						limit, bulk, q.AfterSeq, fmtCommits(got), only.Complete, fmtCommits(want), full.Complete)
				}
				for _, w := range []store.CommitWindow{full, only} {
					if w.Release != nil {
						w.Release()
					}
				}
				if len(want) == 0 || full.Complete {
					break
				}
				q.AfterSeq = want[len(want)-1].Seq
			}
		}
	}
}
