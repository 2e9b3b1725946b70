package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// waitForLockWaiter returns once a backend waits for a lock on the
// schema's sync_partitions (pg_locks, not granted); it fails the test when
// the writer reports on wrote first: it did not block.
func waitForLockWaiter(t *testing.T, s *Store, wrote <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting int64
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'relation' AND relation = 'sync_partitions'::regclass AND NOT granted`).Scan(&waiting)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("pg_locks: %v", err)
		}
		if waiting > 0 {
			return
		}
		select {
		case <-tick.C:
		case err := <-wrote:
			t.Fatalf("the writer returned while the bump held the migration lock: %v", err)
		case <-ctx.Done():
			t.Fatal("no backend waits for the migration lock")
		}
	}
}

// TestBumpBlocksThenFencesOldWriter: a schema bump's first statement,
// LOCK TABLE sync_partitions IN EXCLUSIVE MODE, blocks a concurrent writer
// still running the previous version at the writer's first statement (its
// partition lock); once the bump commits (marker, declaration, fences),
// the writer's append is refused by the fence trigger and nothing of its
// transaction is written.
func TestBumpBlocksThenFencesOldWriter(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	ctx := context.Background()
	v1 := testSchema(t, 1)
	v2 := testSchema(t, 2, schema.String("added").Null())

	// Store A: the old server, at version 1, with a partition in use.
	a := openIn(t, name, Config{})
	ensure(t, a, v1)
	apply(t, a, "p", task{id: "t1", project: "p1", owner: "o"}.write(t, v1, 1))

	// Store B: the new server; its bump pauses with the lock held.
	locked := make(chan struct{})
	release := make(chan struct{})
	b := openIn(t, name, Config{migrationLocked: func() {
		close(locked)
		<-release
	}})
	var releaseOnce sync.Once
	unpause := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unpause) // before the stores close, should the test stop early
	decls := []store.CheckpointDeclaration{{Partition: "p", Name: "proj", SchemaVersion: 2}}
	bumped := make(chan error, 1)
	go func() { bumped <- b.EnsureSchemaWith(ctx, v2, decls) }()
	select {
	case <-locked:
	case err := <-bumped:
		t.Fatalf("the bump returned without pausing under the lock: %v", err)
	}

	// A writes a row and appends its commit while the bump holds the lock.
	w := task{id: "t2", project: "p1", owner: "o", title: ptr("old")}.write(t, v1, 1)
	wrote := make(chan error, 1)
	go func() {
		wrote <- a.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			_, err := tx.AppendCommit(ctx, commitOf("old-writer", upsertChange(w)))
			return err
		})
	}()
	waitForLockWaiter(t, a, wrote)
	select {
	case err := <-wrote:
		t.Fatalf("the old writer returned while the bump held the lock: %v", err)
	case <-time.After(50 * time.Millisecond):
	}

	unpause()
	if err := <-bumped; err != nil {
		t.Fatalf("EnsureSchemaWith(v2, declared): %v", err)
	}
	err := <-wrote
	if store.ErrorCode(err) != store.CodeWriterFenceRejected {
		t.Fatalf("the old writer's Write after the bump = %v, want code %s", err, store.CodeWriterFenceRejected)
	}

	// Nothing of A's transaction is in the database; the bump is.
	if _, err := b.Row(ctx, "p", "tasks", "t2"); err == nil {
		t.Error("the fenced writer's row was written")
	}
	if p, err := b.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 1 {
		t.Errorf("Partition(p) = %+v, %v; want MaxCommitSeq 1", p, err)
	}
	if n := queryInt(t, b, `SELECT count(*) FROM sync_commits`); n != 1 {
		t.Errorf("%d commit rows, want 1", n)
	}
	if n := queryInt(t, b, `SELECT count(*) FROM sync_changes`); n != 1 {
		t.Errorf("%d change rows, want 1", n)
	}
	if n := queryInt(t, b, `SELECT required_writer_version FROM sync_writer_fence WHERE partition = 'p'`); n != 2 {
		t.Errorf("fence of p = %d, want 2", n)
	}
	if m, err := b.Marker(ctx); err != nil || m.SchemaVersion != 2 {
		t.Errorf("Marker = %+v, %v; want version 2", m, err)
	}
	if cps, err := b.ReadCheckpoints(ctx, "p"); err != nil || len(cps) != 1 || cps[0].State != store.CheckpointDeclared || cps[0].SchemaVersion != 2 {
		t.Errorf("ReadCheckpoints(p) = %+v, %v; want proj declared at version 2", cps, err)
	}
	// The new server writes.
	apply(t, b, "p", task{id: "t3", project: "p1", owner: "o"}.write(t, v2, 1))
}

// TestServeGateInWriteAfterBump: a write that began before a bump and
// waited for it reads the bumped gate on its own connection after the
// partition lock.
func TestServeGateInWriteAfterBump(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	ctx := context.Background()
	v1 := testSchema(t, 1)
	a := openIn(t, name, Config{})
	ensure(t, a, v1)
	apply(t, a, "p", task{id: "t1", project: "p1", owner: "o"}.write(t, v1, 1))

	locked := make(chan struct{})
	release := make(chan struct{})
	b := openIn(t, name, Config{migrationLocked: func() {
		close(locked)
		<-release
	}})
	var releaseOnce sync.Once
	unpause := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unpause)
	v2 := testSchema(t, 2)
	bumped := make(chan error, 1)
	go func() { bumped <- b.EnsureSchema(ctx, v2) }()
	<-locked
	gates := make(chan store.ServeGate, 1)
	wrote := make(chan error, 1)
	go func() {
		wrote <- a.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			g, err := tx.(store.BarrierTx).ServeGate(ctx, 1)
			gates <- g
			return err
		})
	}()
	waitForLockWaiter(t, a, wrote)
	unpause()
	if err := <-bumped; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if g := <-gates; g.StoredSchemaVersion != 2 {
		t.Errorf("gate in the waiting write = %+v, want stored version 2", g)
	}
}
