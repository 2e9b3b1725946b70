package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunPrune tests PruneThrough, the horizon and CommitSeqBefore.
func RunPrune(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"DeletesThrough", testPruneDeletesThrough},
		{"HorizonNeverMovesBack", testPruneNeverBack},
		{"CappedAtNewest", testPruneCapped},
		{"EmptyLog", testPruneEmptyLog},
		{"WrongEpoch", testPruneWrongEpoch},
		{"UnknownPartition", testPruneUnknownPartition},
		{"RowsAndResultsSurvive", testPruneKeepsRowsAndResults},
		{"Concurrent", testPruneConcurrent},
		{"CommitSeqBefore", testCommitSeqBefore},
	})
}

// prune runs PruneThrough and fails the test when it fails.
func (e *env) prune(partition, epoch string, through int64) store.PruneResult {
	e.t.Helper()
	r, err := e.s.PruneThrough(e.ctx, partition, epoch, through)
	if err != nil {
		e.t.Fatalf("PruneThrough(%q, %q, %d): %v", partition, epoch, through, err)
	}
	return r
}

func (e *env) wantPrune(partition string, through int64, want store.PruneResult) {
	e.t.Helper()
	if got := e.prune(partition, epochOf(partition), through); got != want {
		e.t.Errorf("PruneThrough(%d) = %+v, want %+v", through, got, want)
	}
}

// fillLog appends n commits of one task change, commit i created at
// 1000*i, and returns the scopes that match them.
func (e *env) fillLog(partition string, n int) wire.ScopeMap {
	e.t.Helper()
	w := Task{ID: "t1", ProjectID: "p"}.RowWrite(e.t, 1)
	for i := 1; i <= n; i++ {
		c := newCommit(UpsertChange(w))
		c.CreatedAtMs = int64(1000 * i)
		e.write(partition, func(ctx context.Context, tx store.WriteTx) error {
			_, err := tx.AppendCommit(ctx, c)
			return err
		})
	}
	return projectScope("p")
}

// wantLog checks the commits left in (0, through] and the horizon.
func (e *env) wantLog(partition string, scopes wire.ScopeMap, horizon, newest int64) {
	e.t.Helper()
	p := e.partition(partition)
	if p.HorizonSeq != horizon || p.MaxCommitSeq != newest {
		e.t.Errorf("Partition = horizon %d, max %d; want horizon %d, max %d", p.HorizonSeq, p.MaxCommitSeq, horizon, newest)
	}
	for _, after := range []int64{0, horizon / 2} {
		got := seqs(e.window(partition, store.CommitWindowQuery{Table: TableTasks, Scopes: scopes, AfterSeq: after, ThroughSeq: newest + 5}))
		if want := seqRange(horizon+1, newest); !slices.Equal(got, want) {
			e.t.Errorf("window after %d with horizon %d = %v, want %v", after, horizon, got, want)
		}
	}
}

func testPruneDeletesThrough(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	scopes := e.fillLog("p1", 10)
	e.wantPrune("p1", 4, store.PruneResult{HorizonSeq: 4, CommitsDeleted: 4})
	e.wantLog("p1", scopes, 4, 10)
	e.wantPrune("p1", 7, store.PruneResult{HorizonSeq: 7, CommitsDeleted: 3})
	e.wantLog("p1", scopes, 7, 10)
}

func testPruneNeverBack(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	scopes := e.fillLog("p1", 10)
	e.wantPrune("p1", 4, store.PruneResult{HorizonSeq: 4, CommitsDeleted: 4})
	for _, through := range []int64{2, 0, 4} {
		e.wantPrune("p1", through, store.PruneResult{HorizonSeq: 4})
	}
	e.wantLog("p1", scopes, 4, 10)
}

func testPruneCapped(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	scopes := e.fillLog("p1", 10)
	e.wantPrune("p1", 100, store.PruneResult{HorizonSeq: 10, CommitsDeleted: 10})
	e.wantLog("p1", scopes, 10, 10)
	e.fillLog("p1", 1)
	e.wantLog("p1", scopes, 10, 11)
}

func testPruneEmptyLog(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.wantPrune("p1", 5, store.PruneResult{})
	if p := e.partition("p1"); p.HorizonSeq != 0 {
		t.Errorf("HorizonSeq after pruning an empty log = %d, want 0", p.HorizonSeq)
	}
}

func testPruneWrongEpoch(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	scopes := e.fillLog("p1", 5)
	r, err := e.s.PruneThrough(e.ctx, "p1", "stale", 3)
	if !errors.Is(err, store.ErrEpochMismatch) {
		t.Errorf("PruneThrough(wrong epoch) = %+v, %v; want ErrEpochMismatch", r, err)
	}
	e.wantLog("p1", scopes, 0, 5)
}

func testPruneUnknownPartition(t *testing.T, open Opener) {
	e := newEnv(t, open)
	r, err := e.s.PruneThrough(e.ctx, "nope", epochOf("nope"), 3)
	if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrEpochMismatch) {
		t.Errorf("PruneThrough(unregistered partition) = %+v, %v; want ErrNotFound or ErrEpochMismatch", r, err)
	}
}

func testPruneKeepsRowsAndResults(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: 1, Results: []wire.OpResult{{Status: wire.OpApplied}}}
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		if _, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w))); err != nil {
			return err
		}
		_, err := tx.PutPushResult(ctx, "client-1", "cc-1", rec)
		return err
	})
	e.wantPrune("p1", 1, store.PruneResult{HorizonSeq: 1, CommitsDeleted: 1})
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, w.Row) {
		t.Errorf("Row after prune = %s, want %s", fmtRow(got), fmtRow(w.Row))
	}
	if got := e.scan("p1", TableTasks, projectScope("p1")); len(got) != 1 {
		t.Errorf("scan after prune = %s, want the row", fmtRows(got))
	}
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-1"); err != nil || !samePushRecord(got, rec) {
		t.Errorf("PushResult after prune = %s, %v; want %s", fmtPushRecord(got), err, fmtPushRecord(rec))
	}
}

// testPruneConcurrent: concurrent prunes never lower the horizon and
// delete every commit once.
func testPruneConcurrent(t *testing.T, open Opener) {
	const n = 8
	e := newEnv(t, open)
	e.touch("p1")
	scopes := e.fillLog("p1", 10)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]store.PruneResult, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := e.s.PruneThrough(e.ctx, "p1", epochOf("p1"), int64(i+1))
			if err != nil {
				t.Errorf("PruneThrough(%d): %v", i+1, err)
			}
			results[i] = r
		})
	}
	close(start)
	wg.Wait()
	var deleted int64
	for i, r := range results {
		deleted += r.CommitsDeleted
		if r.HorizonSeq < int64(i+1) {
			t.Errorf("PruneThrough(%d) = %+v: horizon below its own through", i+1, r)
		}
	}
	if deleted != n {
		t.Errorf("concurrent prunes deleted %d commits in all, want %d", deleted, n)
	}
	e.wantLog("p1", scopes, n, 10)
}

func testCommitSeqBefore(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	e.fillLog("p1", 10) // commit i created at 1000*i
	tests := []struct {
		beforeMs int64
		want     int64
	}{
		{0, 0},
		{1000, 0},
		{1001, 1},
		{2500, 2},
		{10_000, 9},
		{10_001, 10},
		{1 << 50, 10},
	}
	for _, tt := range tests {
		got, err := e.s.CommitSeqBefore(e.ctx, "p1", tt.beforeMs)
		if err != nil || got != tt.want {
			t.Errorf("CommitSeqBefore(%d) = %d, %v; want %d", tt.beforeMs, got, err, tt.want)
		}
	}
	if got, err := e.s.CommitSeqBefore(e.ctx, "p2", 1<<50); err != nil || got != 0 {
		t.Errorf("CommitSeqBefore on an empty log = %d, %v; want 0", got, err)
	}
}
