package storetest

import (
	"context"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// tombstone reads a row's tombstone in a Write.
func (e *env) tombstone(partition, table, rowID string) (int64, bool) {
	e.t.Helper()
	var (
		seq int64
		ok  bool
	)
	e.write(partition, func(ctx context.Context, tx store.WriteTx) error {
		var err error
		seq, ok, err = tx.Tombstone(ctx, table, rowID)
		return err
	})
	return seq, ok
}

func (e *env) wantTombstone(partition, table, rowID string, wantSeq int64, wantOK bool) {
	e.t.Helper()
	if seq, ok := e.tombstone(partition, table, rowID); seq != wantSeq || ok != wantOK {
		e.t.Errorf("Tombstone(%s, %q) = %d, %t; want %d, %t", table, rowID, seq, ok, wantSeq, wantOK)
	}
}

func testTombstoneOnDelete(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", w)
	e.wantTombstone("p1", TableTasks, "t1", 0, false)
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.DeleteRow(ctx, TableTasks, "t1"); err != nil {
			return err
		}
		seq, err := tx.AppendCommit(ctx, newCommit(DeleteChange(w.Row)))
		if err != nil {
			return err
		}
		if got, ok, err := tx.Tombstone(ctx, TableTasks, "t1"); err != nil || got != seq || !ok {
			t.Errorf("Tombstone in the deleting transaction = %d, %t, %v; want %d, true", got, ok, err, seq)
		}
		return nil
	})
	e.wantTombstone("p1", TableTasks, "t1", 2, true)
	e.wantTombstone("p1", TableNotes, "t1", 0, false)
	e.wantTombstone("p1", TableTasks, "t2", 0, false)
	// A later delete moves the tombstone to its commit.
	AppendCommit(t, e.s, "p1", UpsertChange(Task{ID: "t2", ProjectID: "p1"}.RowWrite(t, 1)))
	AppendCommit(t, e.s, "p1", DeleteChange(w.Row))
	e.wantTombstone("p1", TableTasks, "t1", 4, true)
	e.wantTombstone("p1", TableTasks, "t2", 0, false)
}

func testClearTombstone(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	AppendCommit(t, e.s, "p1", DeleteChange(w.Row))
	AppendCommit(t, e.s, "p1", DeleteChange(Note{ID: "t1", ProjectID: "p1", TeamID: "x"}.RowWrite(t, 1).Row))
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.ClearTombstone(ctx, TableTasks, "t1"); err != nil {
			return err
		}
		if seq, ok, err := tx.Tombstone(ctx, TableTasks, "t1"); err != nil || ok {
			t.Errorf("Tombstone after ClearTombstone in the same transaction = %d, %t, %v; want none", seq, ok, err)
		}
		return tx.ClearTombstone(ctx, TableTasks, "never-deleted")
	})
	e.wantTombstone("p1", TableTasks, "t1", 0, false)
	e.wantTombstone("p1", TableNotes, "t1", 2, true)
}

func testTombstonePruned(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	r1 := Task{ID: "r1", ProjectID: "p1"}.RowWrite(t, 1)
	r2 := Task{ID: "r2", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", r1)     // 1
	e.remove("p1", r1.Row) // 2
	e.upsert("p1", r2)     // 3
	e.remove("p1", r2.Row) // 4
	e.upsert("p1", r1)     // 5
	for _, tt := range []struct {
		through    int64
		r1OK, r2OK bool
	}{
		{1, true, true},
		{2, false, true},
		{3, false, true},
		{4, false, false},
	} {
		e.prune("p1", epochOf("p1"), tt.through)
		if _, ok := e.tombstone("p1", TableTasks, "r1"); ok != tt.r1OK {
			t.Errorf("after prune through %d: tombstone of r1 (seq 2) present = %t, want %t", tt.through, ok, tt.r1OK)
		}
		if _, ok := e.tombstone("p1", TableTasks, "r2"); ok != tt.r2OK {
			t.Errorf("after prune through %d: tombstone of r2 (seq 4) present = %t, want %t", tt.through, ok, tt.r2OK)
		}
	}
}
