package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunEpoch tests log epochs: creation, rotation after a restore, and the
// epoch checks of prune and cursor advances.
func RunEpoch(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"TouchKeepsFirstEpoch", testTouchKeepsEpoch},
		{"Rotate", testRotateEpoch},
		{"PruneWithOldEpoch", testPruneOldEpoch},
		{"AdvanceWithOldEpoch", testAdvanceOldEpoch},
	})
}

func testTouchKeepsEpoch(t *testing.T, open Opener) {
	e := newEnv(t, open)
	for i, epoch := range []string{"e1", "e2", "e1"} {
		p, err := e.s.TouchPartition(e.ctx, "p1", int64(1000+i), epoch)
		if err != nil {
			t.Fatalf("TouchPartition(%q): %v", epoch, err)
		}
		if p.LogEpoch != "e1" || p.EpochRequired {
			t.Errorf("TouchPartition #%d with %q: epoch %q required %t, want e1, false", i+1, epoch, p.LogEpoch, p.EpochRequired)
		}
	}
	if p := e.partition("p1"); p.LogEpoch != "e1" {
		t.Errorf("Partition().LogEpoch = %q, want e1", p.LogEpoch)
	}
}

// rotated sets up p1 with a row, a commit, a push result and a client,
// p2 with a client, and rotates p1's epoch to "rotated".
func rotated(t *testing.T, open Opener) *env {
	t.Helper()
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		seq, err := tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
		if err != nil {
			return err
		}
		_, err = tx.PutPushResult(ctx, "c1", "cc-1", store.PushRecord{Status: wire.PushApplied, CommitSeq: seq, Results: []wire.OpResult{}})
		return err
	})
	e.putClient("p1", store.ClientRecord{ClientID: "c1", ActorID: "a1", Cursor: 1, UpdatedAtMs: 1000})
	e.putClient("p2", store.ClientRecord{ClientID: "c1", ActorID: "a1", Cursor: 1, UpdatedAtMs: 1000})
	if err := e.s.RotateLogEpoch(e.ctx, "p1", "rotated", 5000); err != nil {
		t.Fatalf("RotateLogEpoch: %v", err)
	}
	return e
}

func testRotateEpoch(t *testing.T, open Opener) {
	e := rotated(t, open)
	p := e.partition("p1")
	if p.LogEpoch != "rotated" || !p.EpochRequired || p.MaxCommitSeq != 1 {
		t.Errorf("Partition after rotation = %+v, want epoch rotated, required, max 1", p)
	}
	if got, err := e.s.Client(e.ctx, "p1", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Client after rotation = %s, %v; want ErrNotFound (records forgotten)", fmtClient(got), err)
	}
	if _, err := e.s.Client(e.ctx, "p2", "c1"); err != nil {
		t.Errorf("Client of another partition after rotation: %v, want the record", err)
	}
	if p2 := e.partition("p2"); p2.LogEpoch != epochOf("p2") || p2.EpochRequired {
		t.Errorf("other partition after rotation = %+v, want untouched", p2)
	}
	e.row("p1", TableTasks, "t1")
	if _, err := e.s.PushResult(e.ctx, "p1", "c1", "cc-1"); err != nil {
		t.Errorf("PushResult after rotation: %v, want the record kept", err)
	}
	got, err := e.s.TouchPartition(e.ctx, "p1", 6000, "another")
	if err != nil {
		t.Fatalf("TouchPartition: %v", err)
	}
	if got.LogEpoch != "rotated" || !got.EpochRequired {
		t.Errorf("TouchPartition after rotation = %+v, want epoch rotated, required", got)
	}
	if err := e.s.RotateLogEpoch(e.ctx, "p1", "rotated-again", 7000); err != nil {
		t.Fatalf("second RotateLogEpoch: %v", err)
	}
	if p := e.partition("p1"); p.LogEpoch != "rotated-again" || !p.EpochRequired {
		t.Errorf("Partition after a second rotation = %+v, want epoch rotated-again, required", p)
	}
}

func testPruneOldEpoch(t *testing.T, open Opener) {
	e := rotated(t, open)
	if r, err := e.s.PruneThrough(e.ctx, "p1", epochOf("p1"), 1); !errors.Is(err, store.ErrEpochMismatch) {
		t.Errorf("PruneThrough(pre-rotation epoch) = %+v, %v; want ErrEpochMismatch", r, err)
	}
	if p := e.partition("p1"); p.HorizonSeq != 0 {
		t.Errorf("HorizonSeq after a refused prune = %d, want 0", p.HorizonSeq)
	}
	if got := e.window("p1", store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: 1}); len(got) != 1 {
		t.Errorf("log after a refused prune = %s, want the commit", fmtCommits(got))
	}
	if r := e.prune("p1", "rotated", 1); r != (store.PruneResult{HorizonSeq: 1, CommitsDeleted: 1}) {
		t.Errorf("PruneThrough(current epoch) = %+v, want horizon 1, 1 deleted", r)
	}
}

func testAdvanceOldEpoch(t *testing.T, open Opener) {
	e := rotated(t, open)
	rec := store.ClientRecord{ClientID: "c1", ActorID: "a1", Cursor: 1, UpdatedAtMs: 6000}
	e.putClient("p1", rec)
	a := store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 5, AtMs: 7000}
	if ok, err := e.s.AdvanceClientCursor(e.ctx, "p1", a); !errors.Is(err, store.ErrEpochMismatch) {
		t.Errorf("AdvanceClientCursor(pre-rotation epoch) = %t, %v; want ErrEpochMismatch", ok, err)
	}
	e.wantClient("p1", rec)
	a.LogEpoch = "rotated"
	if ok, err := e.s.AdvanceClientCursor(e.ctx, "p1", a); !ok || err != nil {
		t.Errorf("AdvanceClientCursor(current epoch) = %t, %v; want true", ok, err)
	}
}
