package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

var errBoom = errors.New("boom")

func TestDenseSequenceUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	const writers, each = 16, 10
	var (
		mu   sync.Mutex
		seqs = map[string][]int64{}
		wg   sync.WaitGroup
	)
	for g := range writers {
		partition := []string{"a", "b"}[g%2]
		wg.Go(func() {
			for i := range each {
				w := task{id: fmt.Sprintf("t%d-%d", g, i), project: "p", owner: "o"}.write(t, c, 1)
				var seq int64
				err := s.Write(context.Background(), partition, func(ctx context.Context, tx store.WriteTx) error {
					if i%3 == 0 { // a rolled-back append consumes nothing
						_ = tx.Candidate(ctx, func(ctx context.Context) error {
							if _, err := tx.AppendCommit(ctx, commitOf("rolled-back", upsertChange(w))); err != nil {
								return err
							}
							return errBoom
						})
					}
					if err := tx.UpsertRow(ctx, w); err != nil {
						return err
					}
					var err error
					seq, err = tx.AppendCommit(ctx, commitOf(w.RowID, upsertChange(w)))
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seqs[partition] = append(seqs[partition], seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, p := range []string{"a", "b"} {
		got := slices.Sorted(slices.Values(seqs[p]))
		for i, seq := range got {
			if seq != int64(i+1) {
				t.Fatalf("partition %s: sequences %v are not 1..%d", p, got, len(got))
			}
		}
		part, err := s.Partition(context.Background(), p)
		if err != nil || part.MaxCommitSeq != writers/2*each {
			t.Errorf("Partition(%s) = %+v, %v", p, part, err)
		}
	}
	st := s.Stats()
	if st.Writes != writers*each || st.Commits != writers*each || st.Batches < 1 || st.Batches > writers*each || st.WriteErrors != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestWriteRollsBack(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	w := task{id: "t1", project: "p", owner: "o"}.write(t, c, 1)
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		if _, err := tx.AppendCommit(ctx, commitOf("x", upsertChange(w))); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Write = %v; want fn's error", err)
	}
	if _, err := s.Row(ctx, "p", "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Row after rollback = %v", err)
	}
	if seq := apply(t, s, "p", w); seq != 1 {
		t.Errorf("first commit after a rollback: seq %d", seq)
	}
	// A failed statement whose error fn swallows fails the commit.
	err = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		_, _ = tx.PutPushResult(ctx, "c", "x", store.PushRecord{Status: wire.PushApplied, CommitSeq: 1})
		_, _ = s.pool.Exec(ctx, "SELECT 1") // another connection, unaffected
		if _, err := tx.Row(ctx, "tasks", "t1"); err != nil {
			return err
		}
		br, err := tx.(*writeTx).send(ctx, func(b *pgx.Batch) { b.Queue("SELECT 1/0") })
		if err == nil {
			_, err = br.Exec()
			_ = br.Close()
		}
		if err == nil {
			t.Error("division by zero did not fail")
		}
		return nil
	})
	if err == nil {
		t.Error("Write after a swallowed failure succeeded")
	}
	if st := s.Stats(); st.WriteErrors != 2 {
		t.Errorf("WriteErrors = %d", st.WriteErrors)
	}
	if _, err := s.PushResult(ctx, "p", "c", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("push result of a failed Write: %v", err)
	}
}

func TestReadYourWritesAndCandidate(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	w1 := task{id: "t1", project: "p", owner: "o"}.write(t, c, 1)
	w2 := task{id: "t2", project: "p", owner: "o"}.write(t, c, 1)
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		if tx.Partition() != "p" {
			t.Errorf("Partition = %q", tx.Partition())
		}
		if err := tx.UpsertRow(ctx, w1); err != nil {
			return err
		}
		if r, err := tx.Row(ctx, "tasks", "t1"); err != nil || r.ServerVersion != 1 {
			t.Errorf("tx.Row = %+v, %v", r, err)
		}
		if _, err := s.Row(ctx, "p", "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("uncommitted row visible outside: %v", err)
		}
		// A failed candidate undoes its writes and the transaction goes on,
		// whether or not it sent anything.
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.UpsertRow(ctx, w2); err != nil {
				return err
			}
			if err := tx.DeleteRow(ctx, "tasks", "t1"); err != nil {
				return err
			}
			if _, err := tx.Row(ctx, "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("deleted row visible in tx: %v", err)
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Errorf("Candidate = %v", err)
		}
		if err := tx.Candidate(ctx, func(ctx context.Context) error {
			return tx.DeleteRow(ctx, "tasks", "t1") // deferred, dropped
		}); err != nil {
			return err
		}
		if _, err := tx.Row(ctx, "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("t1 after a kept deferred delete: %v", err)
		}
		if err := tx.Candidate(ctx, func(ctx context.Context) error {
			return errors.Join(tx.UpsertRow(ctx, w1), tx.Candidate(ctx, func(context.Context) error { return errBoom }))
		}); !errors.Is(err, errBoom) {
			t.Errorf("nested Candidate = %v", err)
		}
		if _, err := tx.Row(ctx, "tasks", "t2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("t2 after its candidate failed: %v", err)
		}
		seq, err := tx.AppendCommit(ctx, commitOf("c"))
		if seq != 1 {
			t.Errorf("seq = %d", seq)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"t1": false, "t2": false} {
		_, err := s.Row(ctx, "p", "tasks", id)
		if found := err == nil; found != want {
			t.Errorf("Row(%s) = %v", id, err)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM sync_row_scopes`); n != 0 {
		t.Errorf("scope entries left: %d", n)
	}
}

func TestConstraintError(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	apply(t, s, "p", task{id: "t1", project: "p", owner: "o", title: ptr("same")}.write(t, c, 1))
	// Same title in another partition: the index leads with the partition.
	apply(t, s, "q", task{id: "t1", project: "p", owner: "o", title: ptr("same")}.write(t, c, 1))
	dup := task{id: "t2", project: "p", owner: "o", title: ptr("same")}.write(t, c, 1)
	other := task{id: "t3", project: "p", owner: "o", title: ptr("other")}.write(t, c, 1)
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		err := tx.Candidate(ctx, func(ctx context.Context) error { return tx.UpsertRow(ctx, dup) })
		var ce *store.ConstraintError
		if !errors.As(err, &ce) || ce.Table != "tasks" || ce.Constraint != "tasks_by_title" {
			t.Errorf("UpsertRow of a duplicate = %v; want a ConstraintError on tasks_by_title", err)
		}
		return tx.UpsertRow(ctx, other)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Row(ctx, "p", "tasks", "t3"); err != nil {
		t.Errorf("row written after the rejected candidate: %v", err)
	}
}

func TestWriterFence(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `INSERT INTO sync_writer_fence(partition, required_writer_version) VALUES ('fenced', 2)`); err != nil {
		t.Fatal(err)
	}
	err := s.Write(ctx, "fenced", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, commitOf("x"))
		return err
	})
	if code := store.ErrorCode(err); code != store.CodeWriterFenceRejected {
		t.Errorf("append under a fence = %v (code %q)", err, code)
	}
	apply(t, s, "open", task{id: "t", project: "p", owner: "o"}.write(t, c, 1))
	ensure(t, s, testSchema(t, 2))
	var seq int64
	err = s.Write(ctx, "fenced", func(ctx context.Context, tx store.WriteTx) error {
		var err error
		seq, err = tx.AppendCommit(ctx, commitOf("y"))
		return err
	})
	if err != nil || seq != 1 {
		t.Errorf("append at the fence's version = %d, %v", seq, err)
	}
	if v := queryInt(t, s, `SELECT writer_version FROM sync_commits WHERE partition = 'fenced'`); v != 2 {
		t.Errorf("writer_version = %d", v)
	}
}
