package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunRows tests current rows: writes, reads, transactions' own writes,
// candidates, unique indexes and tombstones.
func RunRows(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"RoundTrip", testRowRoundTrip},
		{"Replace", testRowReplace},
		{"Delete", testRowDelete},
		{"Absent", testRowAbsent},
		{"DeleteAbsent", testRowDeleteAbsent},
		{"PerPartition", testRowPerPartition},
		{"ReadYourWrites", testRowReadYourWrites},
		{"FailedWriteLeavesNothing", testRowFailedWrite},
		{"CandidateCommits", testCandidateCommits},
		{"CandidateRollback", testCandidateRollback},
		{"CandidateFirstRollback", testCandidateFirstRollback},
		{"UniqueIndex", testUniqueIndex},
		{"TombstoneOnDelete", testTombstoneOnDelete},
		{"ClearTombstone", testClearTombstone},
		{"TombstonePruned", testTombstonePruned},
	})
}

func testRowRoundTrip(t *testing.T, open Opener) {
	withCV := Task{ID: "cv", ProjectID: "p1", Title: ptr("x"), N: ptr(int64(5))}.RowWrite(t, 9)
	withCV.ColumnVersions = []byte{0x02, 0x07, 0x03, 0x09}
	noValues := Note{ID: "nv", ProjectID: "p1", TeamID: "t1", Body: ptr("decoded by the driver")}.RowWrite(t, 4)
	noValues.Values = nil
	tests := []struct {
		name string
		w    store.RowWrite
	}{
		{"nulls", Task{ID: "nulls", ProjectID: "p1"}.RowWrite(t, 1)},
		{"all values", Task{ID: "full", ProjectID: "p1", Title: ptr("titlé ✓"), N: ptr(int64(1) << 52), Blob: []byte{0, 0xfe, 0xff}}.RowWrite(t, 1<<40)},
		{"empty bytes and string", Task{ID: "empty", ProjectID: "p1", Title: ptr(""), Blob: []byte{}}.RowWrite(t, 2)},
		{"two scopes", Note{ID: "note", ProjectID: "p1", TeamID: "t1"}.RowWrite(t, 3)},
		{"column versions", withCV},
		{"values nil", noValues},
	}
	e := newEnv(t, open)
	e.touch("p1")
	for _, tt := range tests {
		e.write("p1", func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, tt.w) })
		if got := e.row("p1", tt.w.Table, tt.w.RowID); !sameRow(got, tt.w.Row) {
			t.Errorf("%s: Row = %s, want %s", tt.name, fmtRow(got), fmtRow(tt.w.Row))
		}
	}
}

func testRowReplace(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.upsert("p1", Note{ID: "n1", ProjectID: "a", TeamID: "t1", Body: ptr("one")}.RowWrite(t, 1))
	w := Note{ID: "n1", ProjectID: "b", TeamID: "t2"}.RowWrite(t, 2)
	w.ColumnVersions = []byte{0x03, 0x01}
	e.upsert("p1", w)
	if got := e.row("p1", TableNotes, "n1"); !sameRow(got, w.Row) {
		t.Errorf("Row after replace = %s, want %s", fmtRow(got), fmtRow(w.Row))
	}
	w2 := Note{ID: "n1", ProjectID: "b", TeamID: "t2"}.RowWrite(t, 3)
	e.upsert("p1", w2)
	if got := e.row("p1", TableNotes, "n1"); !sameRow(got, w2.Row) {
		t.Errorf("Row after replace without column versions = %s, want %s", fmtRow(got), fmtRow(w2.Row))
	}
}

func testRowDelete(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", w)
	e.remove("p1", w.Row)
	e.wantNoRow("p1", TableTasks, "t1")
}

func testRowAbsent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.upsert("p1", Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1))
	e.wantNoRow("p1", TableTasks, "t2")
	e.wantNoRow("p1", TableNotes, "t1")
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if r, err := tx.Row(ctx, TableTasks, "t2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.Row(absent) = %s, %v; want ErrNotFound", fmtRow(r), err)
		}
		return nil
	})
}

func testRowDeleteAbsent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		return tx.DeleteRow(ctx, TableTasks, "never")
	})
	if err != nil {
		t.Errorf("DeleteRow(absent) = %v, want nil", err)
	}
}

func testRowPerPartition(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	w1 := Task{ID: "t1", ProjectID: "x", Title: ptr("one")}.RowWrite(t, 1)
	w2 := Task{ID: "t1", ProjectID: "x", Title: ptr("two")}.RowWrite(t, 5)
	e.upsert("p1", w1)
	e.upsert("p2", w2)
	e.remove("p2", w2.Row)
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, w1.Row) {
		t.Errorf("p1 row after writes to p2 = %s, want %s", fmtRow(got), fmtRow(w1.Row))
	}
	e.wantNoRow("p2", TableTasks, "t1")
}

func testRowReadYourWrites(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	old := Task{ID: "old", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", old)
	v1 := Task{ID: "t1", ProjectID: "p1", Title: ptr("v1")}.RowWrite(t, 1)
	v2 := Task{ID: "t1", ProjectID: "p2", Title: ptr("v2")}.RowWrite(t, 2)
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if got := tx.Partition(); got != "p1" {
			t.Errorf("WriteTx.Partition() = %q, want p1", got)
		}
		for _, w := range []store.RowWrite{v1, v2} {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			if got, err := tx.Row(ctx, TableTasks, "t1"); err != nil || !sameRow(got, w.Row) {
				t.Errorf("WriteTx.Row after UpsertRow = %s, %v; want %s", fmtRow(got), err, fmtRow(w.Row))
			}
		}
		if err := tx.DeleteRow(ctx, TableTasks, "old"); err != nil {
			return err
		}
		if got, err := tx.Row(ctx, TableTasks, "old"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.Row after DeleteRow = %s, %v; want ErrNotFound", fmtRow(got), err)
		}
		return nil
	})
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, v2.Row) {
		t.Errorf("Row after Write = %s, want %s", fmtRow(got), fmtRow(v2.Row))
	}
	e.wantNoRow("p1", TableTasks, "old")
}

func testRowFailedWrite(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	kept := Task{ID: "kept", ProjectID: "p1", Title: ptr("v1")}.RowWrite(t, 1)
	victim := Task{ID: "victim", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", kept)
	e.upsert("p1", victim)
	err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, Task{ID: "kept", ProjectID: "p2", Title: ptr("v2")}.RowWrite(t, 2)); err != nil {
			return err
		}
		if err := tx.UpsertRow(ctx, Task{ID: "new", ProjectID: "p1"}.RowWrite(t, 1)); err != nil {
			return err
		}
		if err := tx.DeleteRow(ctx, TableTasks, "victim"); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Write = %v, want the function's error", err)
	}
	if got := e.row("p1", TableTasks, "kept"); !sameRow(got, kept.Row) {
		t.Errorf("replaced row after a failed Write = %s, want %s", fmtRow(got), fmtRow(kept.Row))
	}
	if got := e.row("p1", TableTasks, "victim"); !sameRow(got, victim.Row) {
		t.Errorf("deleted row after a failed Write = %s, want %s", fmtRow(got), fmtRow(victim.Row))
	}
	e.wantNoRow("p1", TableTasks, "new")
	if got := e.scan("p1", TableTasks, projectScope("p2")); len(got) != 0 {
		t.Errorf("scan of project p2 after a failed Write = %s, want none", fmtRows(got))
	}
	if got := rowIDs(e.scan("p1", TableTasks, projectScope("p1"))); !slices.Equal(got, []string{"kept", "victim"}) {
		t.Errorf("scan of project p1 after a failed Write = %q, want [kept victim]", got)
	}
}
