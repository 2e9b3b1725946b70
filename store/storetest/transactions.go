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

// RunTransactions tests Write: atomicity, isolation of concurrent writers,
// the counters, and Close.
func RunTransactions(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"FailedWriteLeavesNoTrace", testFailedWriteNoTrace},
		{"ConcurrentDistinctPartitions", testConcurrentPartitions},
		{"SerializedReadModifyWrite", testSerializedRMW},
		{"ConcurrentFailuresIsolated", testConcurrentFailures},
		{"Stats", testStats},
		{"Closed", testClosed},
	})
}

func testFailedWriteNoTrace(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	kept := Task{ID: "kept", ProjectID: "p1"}.RowWrite(t, 1)
	gone := Task{ID: "gone", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", kept)                               // 1
	AppendCommit(t, e.s, "p1", DeleteChange(gone.Row)) // 2: tombstone of gone
	err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, Task{ID: "new", ProjectID: "p1"}.RowWrite(t, 1)); err != nil {
			return err
		}
		if err := tx.DeleteRow(ctx, TableTasks, "kept"); err != nil {
			return err
		}
		if _, err := tx.AppendCommit(ctx, newCommit(DeleteChange(kept.Row))); err != nil {
			return err
		}
		if err := tx.ClearTombstone(ctx, TableTasks, "gone"); err != nil {
			return err
		}
		if _, err := tx.PutPushResult(ctx, "client-1", "cc-failed", store.PushRecord{Status: wire.PushApplied, CommitSeq: 3, Results: []wire.OpResult{}}); err != nil {
			return err
		}
		return fmt.Errorf("push: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Write = %v, want the function's error", err)
	}
	if got := e.row("p1", TableTasks, "kept"); !sameRow(got, kept.Row) {
		t.Errorf("Row(kept) = %s, want %s", fmtRow(got), fmtRow(kept.Row))
	}
	e.wantNoRow("p1", TableTasks, "new")
	e.wantLog("p1", projectScope("p1"), 0, 2)
	e.wantTombstone("p1", TableTasks, "kept", 0, false)
	e.wantTombstone("p1", TableTasks, "gone", 2, true)
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-failed"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PushResult of a failed Write = %s, %v; want ErrNotFound", fmtPushRecord(got), err)
	}
}

func testConcurrentPartitions(t *testing.T, open Opener) {
	const partitions, perPartition = 16, 10
	e := newEnv(t, open)
	for i := range partitions {
		e.touch(fmt.Sprintf("p%d", i))
	}
	c := FixtureSchema(t)
	var wg sync.WaitGroup
	for i := range partitions {
		p := fmt.Sprintf("p%d", i)
		wg.Go(func() {
			for v := range perPartition {
				w, err := newRowWrite(c, TableTasks, Task{ID: "t1", ProjectID: p}.Values(), int64(v+1))
				if err == nil {
					err = e.s.Write(e.ctx, p, func(ctx context.Context, tx store.WriteTx) error {
						if err := tx.UpsertRow(ctx, w); err != nil {
							return err
						}
						_, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
						return err
					})
				}
				if err != nil {
					t.Errorf("Write(%q): %v", p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range partitions {
		p := fmt.Sprintf("p%d", i)
		e.wantLog(p, projectScope(p), 0, perPartition)
		if r := e.row(p, TableTasks, "t1"); r.ServerVersion != perPartition {
			t.Errorf("%s: row version = %d, want %d", p, r.ServerVersion, perPartition)
		}
	}
}

// testSerializedRMW: writers of one partition run one at a time and see
// each other's committed writes, so read-modify-write loses no update.
func testSerializedRMW(t *testing.T, open Opener) {
	const writers, perWriter = 16, 10
	e := newEnv(t, open)
	e.touch("p1")
	base := Task{ID: "counter", ProjectID: "p1"}.RowWrite(t, 0)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for range writers {
		wg.Go(func() {
			<-start
			for range perWriter {
				err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
					w := base
					switch r, err := tx.Row(ctx, TableTasks, "counter"); {
					case err == nil:
						w.ServerVersion = r.ServerVersion + 1
					case errors.Is(err, store.ErrNotFound):
						w.ServerVersion = 1
					default:
						return err
					}
					if err := tx.UpsertRow(ctx, w); err != nil {
						return err
					}
					_, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
					return err
				})
				if err != nil {
					t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if r := e.row("p1", TableTasks, "counter"); r.ServerVersion != writers*perWriter {
		t.Errorf("counter version = %d after %d increments, want %d (lost updates)", r.ServerVersion, writers*perWriter, writers*perWriter)
	}
	commits := e.window("p1", store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: writers * perWriter})
	for i, c := range commits {
		if v := c.Changes[0].RowVersion; v != c.Seq {
			t.Errorf("commit %d (#%d) carries version %d, want %d", c.Seq, i, v, c.Seq)
			break
		}
	}
}

// testConcurrentFailures: among concurrent writes to one partition (which
// a driver may group in one database transaction), the failing ones leave
// nothing and the others commit, with dense sequences.
func testConcurrentFailures(t *testing.T, open Opener) {
	const writers = 16
	e := newEnv(t, open)
	e.touch("p1")
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range writers {
		w, err := newRowWrite(FixtureSchema(t), TableTasks, Task{ID: fmt.Sprintf("w%02d", i), ProjectID: "p1"}.Values(), 1)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
				if err := tx.UpsertRow(ctx, w); err != nil {
					return err
				}
				if _, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w))); err != nil {
					return err
				}
				if i%2 == 1 {
					return errBoom
				}
				return nil
			})
			switch {
			case i%2 == 1 && !errors.Is(err, errBoom):
				t.Errorf("failing writer %d: Write = %v, want its error", i, err)
			case i%2 == 0 && err != nil:
				t.Errorf("writer %d: Write = %v, want nil", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var want []string
	for i := 0; i < writers; i += 2 {
		want = append(want, fmt.Sprintf("w%02d", i))
	}
	if got := rowIDs(e.scan("p1", TableTasks, projectScope("p1"))); !slices.Equal(got, want) {
		t.Errorf("rows = %q, want those of the successful writers %q", got, want)
	}
	e.wantLog("p1", projectScope("p1"), 0, writers/2)
	commits := e.window("p1", store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: writers})
	var ids []string
	for _, c := range commits {
		ids = append(ids, c.Changes[0].RowID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Errorf("committed changes = %q, want %q", ids, want)
	}
}

func testStats(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	before := e.s.Stats()
	for range 3 {
		e.upsert("p1", w)
	}
	for range 2 {
		_ = e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error { return errBoom })
	}
	after := e.s.Stats()
	if d := after.Writes - before.Writes; d != 3 {
		t.Errorf("Stats().Writes grew by %d, want 3", d)
	}
	if d := after.WriteErrors - before.WriteErrors; d != 2 {
		t.Errorf("Stats().WriteErrors grew by %d, want 2", d)
	}
	if d := after.Commits - before.Commits; d != 3 {
		t.Errorf("Stats().Commits grew by %d, want 3", d)
	}
	if d := after.Batches - before.Batches; d < 1 || d > 5 {
		t.Errorf("Stats().Batches grew by %d, want 1..5", d)
	}
}

func testClosed(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx, s := e.ctx, e.s
	scopes := projectScope("p1")
	calls := []struct {
		name string
		call func() error
	}{
		{"EnsureSchema", func() error { return s.EnsureSchema(ctx, FixtureSchema(t)) }},
		{"Marker", func() error { _, err := s.Marker(ctx); return err }},
		{"TouchPartition", func() error { _, err := s.TouchPartition(ctx, "p1", 1, "e"); return err }},
		{"Partition", func() error { _, err := s.Partition(ctx, "p1"); return err }},
		{"Write", func() error {
			return s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error { return nil })
		}},
		{"Row", func() error { _, err := s.Row(ctx, "p1", TableTasks, "t1"); return err }},
		{"ReadCommitWindow", func() error {
			_, err := s.ReadCommitWindow(ctx, "p1", store.CommitWindowQuery{Table: TableTasks, Scopes: scopes, ThroughSeq: 1})
			return err
		}},
		{"ScanRows", func() error {
			_, err := s.ScanRows(ctx, "p1", store.RowScanQuery{Table: TableTasks, Scopes: scopes, Limit: 1})
			return err
		}},
		{"PushResult", func() error { _, err := s.PushResult(ctx, "p1", "c", "cc"); return err }},
		{"Client", func() error { _, err := s.Client(ctx, "p1", "c"); return err }},
		{"PutClient", func() error { return s.PutClient(ctx, "p1", store.ClientRecord{ClientID: "c"}) }},
		{"PruneThrough", func() error { _, err := s.PruneThrough(ctx, "p1", epochOf("p1"), 1); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", c.name, err)
		}
	}
}
