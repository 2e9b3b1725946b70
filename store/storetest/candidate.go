package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func testCandidateCommits(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	x := Task{ID: "x", ProjectID: "p1"}.RowWrite(t, 1)
	y := Task{ID: "y", ProjectID: "p1"}.RowWrite(t, 1)
	z := Task{ID: "z", ProjectID: "p1"}.RowWrite(t, 1)
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.UpsertRow(ctx, x); err != nil {
				return err
			}
			_, err := tx.AppendCommit(ctx, newCommit(UpsertChange(x)))
			return err
		})
		if err != nil {
			t.Errorf("Candidate(succeeding) = %v, want nil", err)
		}
		if got, err := tx.Row(ctx, TableTasks, "x"); err != nil || !sameRow(got, x.Row) {
			t.Errorf("WriteTx.Row after a successful candidate = %s, %v; want %s", fmtRow(got), err, fmtRow(x.Row))
		}
		err = tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.UpsertRow(ctx, y); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("Candidate(failing) = %v, want the function's error", err)
		}
		return tx.Candidate(ctx, func(ctx context.Context) error { return tx.UpsertRow(ctx, z) })
	})
	e.row("p1", TableTasks, "x")
	e.wantNoRow("p1", TableTasks, "y")
	e.row("p1", TableTasks, "z")
	if p := e.partition("p1"); p.MaxCommitSeq != 1 {
		t.Errorf("MaxCommitSeq = %d, want 1", p.MaxCommitSeq)
	}
}

// testCandidateRollback: a failed candidate undoes its row writes, scope
// index entries, commit (and its sequence), tombstones and push result,
// and nothing written before it; the transaction goes on.
func testCandidateRollback(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	a := Task{ID: "a", ProjectID: "p1", Title: ptr("v1")}.RowWrite(t, 1)
	c := Task{ID: "c", ProjectID: "p1"}.RowWrite(t, 1)
	before := Task{ID: "before", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", a)
	e.upsert("p1", c)
	rejected := rejectedResult()
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, before); err != nil {
			return err
		}
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			for _, w := range []store.RowWrite{
				Task{ID: "a", ProjectID: "p2", Title: ptr("v2")}.RowWrite(t, 2),
				Task{ID: "b", ProjectID: "p1"}.RowWrite(t, 1),
			} {
				if err := tx.UpsertRow(ctx, w); err != nil {
					return err
				}
			}
			if err := tx.DeleteRow(ctx, TableTasks, "c"); err != nil {
				return err
			}
			seq, err := tx.AppendCommit(ctx, newCommit(DeleteChange(c.Row)))
			if err != nil {
				return err
			}
			if seq != 3 {
				t.Errorf("AppendCommit in the candidate = %d, want 3", seq)
			}
			if _, err := tx.PutPushResult(ctx, "client-1", "cc-1", store.PushRecord{Status: wire.PushApplied, CommitSeq: seq}); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("Candidate(failing) = %v, want the function's error", err)
		}
		for _, w := range []store.RowWrite{a, c, before} {
			if got, err := tx.Row(ctx, TableTasks, w.RowID); err != nil || !sameRow(got, w.Row) {
				t.Errorf("WriteTx.Row(%q) after a failed candidate = %s, %v; want %s", w.RowID, fmtRow(got), err, fmtRow(w.Row))
			}
		}
		if got, err := tx.Row(ctx, TableTasks, "b"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.Row(b) after a failed candidate = %s, %v; want ErrNotFound", fmtRow(got), err)
		}
		if seq, ok, err := tx.Tombstone(ctx, TableTasks, "c"); err != nil || ok {
			t.Errorf("Tombstone(c) after a failed candidate = %d, %t, %v; want none", seq, ok, err)
		}
		if got, err := tx.PushResult(ctx, "client-1", "cc-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.PushResult after a failed candidate = %s, %v; want ErrNotFound", fmtPushRecord(got), err)
		}
		if stored, err := tx.PutPushResult(ctx, "client-1", "cc-1", rejected); err != nil || !stored {
			t.Errorf("PutPushResult(rejection) after a failed candidate = %t, %v; want true", stored, err)
		}
		seq, err := tx.AppendCommit(ctx, newCommit(UpsertChange(before)))
		if err == nil && seq != 3 {
			t.Errorf("AppendCommit after a failed candidate = %d, want 3", seq)
		}
		return err
	})
	for _, w := range []store.RowWrite{a, c, before} {
		if got := e.row("p1", TableTasks, w.RowID); !sameRow(got, w.Row) {
			t.Errorf("Row(%q) = %s, want %s", w.RowID, fmtRow(got), fmtRow(w.Row))
		}
	}
	e.wantCandidateUndone(rejected, 3)
}

// rejectedResult is the push result the candidate tests record after a
// failed candidate.
func rejectedResult() store.PushRecord {
	return store.PushRecord{
		Status:  wire.PushRejected,
		Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpError, Code: "sync.validation_failed", Message: "no"}},
	}
}

// wantCandidateUndone checks what is left of a failed candidate that
// wrote row b and moved a row to project p2: neither, the rejection
// recorded for client-1's cc-1, and the log's head at seq.
func (e *env) wantCandidateUndone(rejected store.PushRecord, seq int64) {
	e.t.Helper()
	e.wantNoRow("p1", TableTasks, "b")
	if got := e.scan("p1", TableTasks, projectScope("p2")); len(got) != 0 {
		e.t.Errorf("scan of project p2 = %s, want none (the candidate's scope change was undone)", fmtRows(got))
	}
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-1"); err != nil || !samePushRecord(got, rejected) {
		e.t.Errorf("PushResult = %s, %v; want %s", fmtPushRecord(got), err, fmtPushRecord(rejected))
	}
	if p := e.partition("p1"); p.MaxCommitSeq != seq {
		e.t.Errorf("MaxCommitSeq = %d, want %d", p.MaxCommitSeq, seq)
	}
}

// testCandidateFirstRollback: the first candidate of a write that has
// only read so far (a push's journal lookup, the row it changes) fails:
// its writes and those of a candidate nested in it are undone, and what
// the write does after it commits (a driver may use the write's own
// savepoint for such a candidate).
func testCandidateFirstRollback(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	a := Task{ID: "a", ProjectID: "p1", Title: ptr("v1")}.RowWrite(t, 1)
	c := Task{ID: "c", ProjectID: "p1"}.RowWrite(t, 1)
	e.upsert("p1", a)
	rejected := rejectedResult()
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if got, err := tx.PushResult(ctx, "client-1", "cc-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.PushResult before any write = %s, %v; want ErrNotFound", fmtPushRecord(got), err)
		}
		if _, err := tx.Row(ctx, TableTasks, "a"); err != nil {
			return err
		}
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.UpsertRow(ctx, Task{ID: "a", ProjectID: "p2", Title: ptr("v2")}.RowWrite(t, 2)); err != nil {
				return err
			}
			if err := tx.Candidate(ctx, func(ctx context.Context) error {
				return tx.UpsertRow(ctx, Task{ID: "b", ProjectID: "p1"}.RowWrite(t, 1))
			}); err != nil {
				return err
			}
			if _, err := tx.AppendCommit(ctx, newCommit(UpsertChange(a))); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("Candidate(failing) = %v, want the function's error", err)
		}
		if stored, err := tx.PutPushResult(ctx, "client-1", "cc-1", rejected); err != nil || !stored {
			t.Errorf("PutPushResult(rejection) after a failed candidate = %t, %v; want true", stored, err)
		}
		if err := tx.UpsertRow(ctx, c); err != nil {
			return err
		}
		seq, err := tx.AppendCommit(ctx, newCommit(UpsertChange(c)))
		if err == nil && seq != 2 {
			t.Errorf("AppendCommit after a failed candidate = %d, want 2", seq)
		}
		return err
	})
	if got := e.row("p1", TableTasks, "a"); !sameRow(got, a.Row) {
		t.Errorf("Row(a) = %s, want %s", fmtRow(got), fmtRow(a.Row))
	}
	e.row("p1", TableTasks, "c")
	e.wantCandidateUndone(rejected, 2)
}

// usersSchema has a declared unique index.
func usersSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("users", "id", schema.String("id"), schema.String("org_id"), schema.String("email")).
		Scope("org:{org_id}").
		UniqueIndex("users_by_email", "email").
		Compile()
	if err != nil {
		t.Fatalf("compile users schema: %v", err)
	}
	return c
}

// testUniqueIndex: a violated declared unique index is a
// *store.ConstraintError; inside a candidate the transaction goes on.
func testUniqueIndex(t *testing.T, open Opener) {
	s := open(t)
	ctx := t.Context()
	c := usersSchema(t)
	if err := s.EnsureSchema(ctx, c); err != nil {
		t.Fatalf("EnsureSchema: %v", err)
	}
	ut, _ := c.Table("users")
	physical := ut.Indexes()[0].PhysicalName
	user := func(id, email string, version int64) store.RowWrite {
		return NewRowWrite(t, c, "users", []wire.Value{{Str: id}, {Str: "o1"}, {Str: email}}, version)
	}
	for _, p := range []string{"p1", "p2"} {
		if _, err := s.TouchPartition(ctx, p, 1000, epochOf(p)); err != nil {
			t.Fatalf("TouchPartition: %v", err)
		}
	}
	wantConstraint := func(what string, err error) {
		t.Helper()
		var ce *store.ConstraintError
		if !errors.As(err, &ce) {
			t.Errorf("%s = %v, want a *store.ConstraintError", what, err)
			return
		}
		if ce.Table != "users" || (ce.Constraint != "users_by_email" && ce.Constraint != physical) {
			t.Errorf("%s: ConstraintError{Table: %q, Constraint: %q}, want table users and constraint users_by_email or %s", what, ce.Table, ce.Constraint, physical)
		}
	}
	ApplyUpsert(t, s, "p1", user("u1", "a@x", 1))
	ApplyUpsert(t, s, "p1", user("u1", "a@x", 2)) // its own value is no violation
	err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, user("u2", "a@x", 1)) })
	wantConstraint("Write(duplicate email)", err)
	err = s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		wantConstraint("Candidate(duplicate email)", tx.Candidate(ctx, func(ctx context.Context) error {
			return tx.UpsertRow(ctx, user("u2", "a@x", 1))
		}))
		return tx.UpsertRow(ctx, user("u3", "b@x", 1))
	})
	if err != nil {
		t.Errorf("Write going on after a violation in a candidate = %v, want nil", err)
	}
	ApplyUpsert(t, s, "p2", user("u9", "a@x", 1)) // indexes are per partition
	for _, id := range []string{"u1", "u3"} {
		if _, err := s.Row(ctx, "p1", "users", id); err != nil {
			t.Errorf("Row(%s) = %v, want the row", id, err)
		}
	}
	if r, err := s.Row(ctx, "p1", "users", "u2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Row(u2) = %s, %v; want ErrNotFound", fmtRow(r), err)
	}
}
