package sqlitestore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// inBatch runs the writes in one batch transaction of the writer, in
// order: the writer is held by a write of its own while they queue.
func inBatch(t *testing.T, s testStore, partition string, fns ...func(ctx context.Context, tx store.WriteTx) error) []error {
	t.Helper()
	ctx := context.Background()
	started, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.Write(ctx, partition, func(context.Context, store.WriteTx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	before := s.stats.batches.Load()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = s.Write(ctx, partition, fn) })
		for len(s.w.reqs) < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := s.stats.batches.Load() - before; got != 2 {
		t.Fatalf("the writes took %d batches after the holding one's, want 1", got-1)
	}
	return errs
}

// TestBatchCacheFollowsTheBatch: within one batch the commit sequence
// numbers on from memory and the serve gate is read once (batchcache.go),
// yet every commit gets the next number after rolled-back requests and
// candidates, a statement of another kind in the batch reads the row as
// numbered so far, and a gate change in the batch (and its rollback) is
// seen by the next gate read.
func TestBatchCacheFollowsTheBatch(t *testing.T) {
	s, ctx := openWriterTest(t)
	running := storetest.FixtureSchema(t).Version()
	boom := errors.New("boom")
	push := func(ctx context.Context, tx store.WriteTx, id string) (int64, error) {
		r := storetest.Task{ID: id, ProjectID: "p1"}.RowWrite(t, 1)
		if err := tx.UpsertRow(ctx, r); err != nil {
			return 0, err
		}
		return tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: id, ActorID: "a", CreatedAtMs: 1,
			Changes: []store.Change{storetest.UpsertChange(r)}})
	}
	gate := func(ctx context.Context, tx store.WriteTx) store.ServeGate {
		g, err := tx.(store.BarrierTx).ServeGate(ctx, running)
		if err != nil {
			t.Error(err)
		}
		return g
	}
	stored := func() int64 { // a statement of another kind, on the writer
		var seq int64
		if err := s.w.c.queryRow("SELECT max_commit_seq FROM sync_partitions WHERE partition='p1'").Scan(&seq); err != nil {
			t.Error(err)
		}
		return seq
	}
	seqs := map[string]int64{}
	unfenced := func(id, when string) func(ctx context.Context, tx store.WriteTx) error {
		return func(ctx context.Context, tx store.WriteTx) error {
			if g := gate(ctx, tx); g.WriterFence != 0 {
				t.Errorf("fence %d %s", g.WriterFence, when)
			}
			seq, err := push(ctx, tx, id)
			seqs[id] = seq
			return err
		}
	}
	errs := inBatch(t, s, "p1",
		unfenced("a", "before any change"),
		func(ctx context.Context, tx store.WriteTx) error { // rolled back whole
			if _, err := push(ctx, tx, "b"); err != nil {
				return err
			}
			return boom
		},
		func(ctx context.Context, tx store.WriteTx) error {
			err := tx.Candidate(ctx, func(ctx context.Context) error {
				if _, err := push(ctx, tx, "c"); err != nil {
					return err
				}
				return boom // this candidate alone rolled back
			})
			if !errors.Is(err, boom) {
				t.Errorf("candidate: %v", err)
			}
			seq, err := push(ctx, tx, "d")
			seqs["d"] = seq
			return err
		},
		func(ctx context.Context, tx store.WriteTx) error {
			seq, err := push(ctx, tx, "e")
			if err != nil {
				return err
			}
			seqs["e"] = seq
			if got := stored(); got != seq {
				t.Errorf("max_commit_seq read in the batch = %d, want %d", got, seq)
			}
			seq, err = push(ctx, tx, "f")
			seqs["f"] = seq
			return err
		},
		func(ctx context.Context, tx store.WriteTx) error { // a fence raised, then rolled back
			_ = gate(ctx, tx)
			if err := installCheckpoint(s.w.c, store.CheckpointDeclaration{Partition: "p1", Name: "n", SchemaVersion: running + 1}, 1); err != nil {
				return err
			}
			if g := gate(ctx, tx); g.WriterFence != running+1 {
				t.Errorf("fence %d after raising it in the batch, want %d", g.WriterFence, running+1)
			}
			if _, err := push(ctx, tx, "fenced"); err == nil {
				t.Errorf("a commit past the raised fence was appended")
			}
			return boom
		},
		unfenced("g", "after the raise was rolled back"),
	)
	for i, want := range []error{nil, boom, nil, nil, boom, nil} {
		if !errors.Is(errs[i], want) {
			t.Errorf("write %d: %v, want %v", i, errs[i], want)
		}
	}
	first := seqs["a"]
	for i, id := range []string{"a", "d", "e", "f", "g"} {
		if seqs[id] != first+int64(i) {
			t.Errorf("commit %s got sequence %d, want %d", id, seqs[id], first+int64(i))
		}
	}
	var ids []string
	var maxSeq int64
	err := s.read(ctx, func(c *conn) error {
		rows, err := c.query("SELECT client_commit_id FROM sync_commits WHERE partition='p1' AND commit_seq >= ? ORDER BY commit_seq", first)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return c.queryRow("SELECT max_commit_seq FROM sync_partitions WHERE partition='p1'").Scan(&maxSeq)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "d", "e", "f", "g"}; len(ids) != len(want) || ids[0] != "a" || ids[1] != "d" || ids[2] != "e" || ids[3] != "f" || ids[4] != "g" {
		t.Errorf("the log holds %v from %d, want %v", ids, first, want)
	}
	if maxSeq != first+4 {
		t.Errorf("max_commit_seq = %d after the batch, want %d", maxSeq, first+4)
	}
	// The next batch numbers on from the row.
	var next int64
	if err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		var err error
		next, err = push(ctx, tx, "h")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if next != first+5 {
		t.Errorf("the next batch's commit got %d, want %d", next, first+5)
	}
}
