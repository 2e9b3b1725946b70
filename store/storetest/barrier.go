package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Reopener is implemented by test stores that can open a second store on
// their own database, as another server process would: the suite uses it
// to run an older writer next to a newer one. The returned store has no
// schema ensured; Reopen registers its cleanup on t.
type Reopener interface {
	Reopen(t testing.TB) store.Store
}

// RawExecer is implemented by test stores that can run SQL on their
// database outside the store's API, so that the suite can damage a
// database as an operator or another build could. ExecRaw applies a
// script of one or more statements atomically: all of them or none. The
// suite's scripts are written for SQLite first; where a script cannot be
// portable it offers a PostgreSQL alternative, tried when the first one
// fails.
type RawExecer interface {
	ExecRaw(ctx context.Context, sql string) error
}

// RunBarrier tests the migration barrier (store.Barrier and
// store.BarrierTx): checkpoints, the writer fence, the serve gate, the
// barrier and the schema bump of EnsureSchemaWith, and the same-version
// physical layout checks. A store without store.Barrier skips the area;
// tests that need an older writer skip without a [Reopener], tests that
// damage the database without a [RawExecer].
//
// Where the contract leaves a choice, the suite accepts either reading:
// claiming an activated checkpoint may fail or return it unchanged.
func RunBarrier(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"DeclareRaisesFence", testDeclareRaisesFence},
		{"FenceNeverLowers", testFenceNeverLowers},
		{"RedeclareKeepsState", testRedeclareKeepsState},
		{"Claim", testClaim},
		{"ClaimConcurrent", testClaimConcurrent},
		{"StaleOwnerWritesNothing", testStaleOwner},
		{"StaleOwnerInTransaction", testStaleOwnerInTx},
		{"ActivateWithoutFence", testActivateWithoutFence},
		{"ActivateStaleThenClean", testActivateStaleThenClean},
		{"ActivateUnverifiable", testActivateUnverifiable},
		{"SourceCoverageSeq", testSourceCoverageSeq},
		{"HasSourceChangesAbove", testHasSourceChangesAbove},
		{"ServeGate", testServeGate},
		{"EnsureBarrier", testEnsureBarrier},
		{"BumpBarrier", testBumpBarrier},
		{"BumpInstallsDeclarations", testBumpInstallsDeclarations},
		{"BumpRewritesPayloads", testBumpRewritesPayloads},
		{"PhysicalLayout", testPhysicalLayout},
	})
}

const (
	skipNoReopen = "the store does not implement storetest.Reopener: the older writer is not tested"
	skipNoRaw    = "the store does not implement storetest.RawExecer: a damaged database cannot be made"
)

// barrierOf returns the store's barrier, or skips the test.
func barrierOf(t *testing.T, s store.Store) store.Barrier {
	t.Helper()
	b, ok := s.(store.Barrier)
	if !ok {
		t.Skip("the store does not implement store.Barrier: the migration barrier is not tested")
	}
	return b
}

// reopen returns a second store on s's database, or nil without a
// Reopener.
func reopen(t *testing.T, s store.Store) store.Store {
	t.Helper()
	r, ok := s.(Reopener)
	if !ok {
		return nil
	}
	return r.Reopen(t)
}

// rawExecer returns the store's RawExecer, or skips the test.
func rawExecer(t *testing.T, s store.Store) RawExecer {
	t.Helper()
	rx, ok := s.(RawExecer)
	if !ok {
		t.Skip(skipNoRaw)
	}
	return rx
}

// execScript runs the first of the alternative scripts the database
// accepts.
func execScript(t *testing.T, rx RawExecer, alternatives ...string) {
	t.Helper()
	var errs []error
	for _, sql := range alternatives {
		err := rx.ExecRaw(t.Context(), sql)
		if err == nil {
			return
		}
		errs = append(errs, err)
	}
	t.Fatalf("ExecRaw: no alternative was accepted: %v", errors.Join(errs...))
}

// schemaAt is the fixture's tables at another schema version, with the
// same layout.
func schemaAt(t *testing.T, version int32) *schema.Compiled {
	t.Helper()
	if version == 1 {
		return FixtureSchema(t)
	}
	return mustCompile(t, version, taskColumns(), true)
}

// grownSchema is version 2 with a nullable boolean "done" appended to
// tasks.
func grownSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	return mustCompile(t, 2, append(taskColumns(), schema.Boolean("done").Null()), true)
}

func ensure(t *testing.T, s store.Store, c *schema.Compiled) {
	t.Helper()
	if err := s.EnsureSchema(t.Context(), c); err != nil {
		t.Fatalf("EnsureSchema(version %d): %v", c.Version(), err)
	}
}

func touch(t *testing.T, s store.Store, partitions ...string) {
	t.Helper()
	for _, p := range partitions {
		if _, err := s.TouchPartition(t.Context(), p, 1000, epochOf(p)); err != nil {
			t.Fatalf("TouchPartition(%q): %v", p, err)
		}
	}
}

func decl(partition, name string, version int32) store.CheckpointDeclaration {
	return store.CheckpointDeclaration{Partition: partition, Name: name, SchemaVersion: version}
}

// sourceChange returns a log change of a row of the table (a task or a
// note) with a fresh id.
func sourceChange(t *testing.T, table string) store.Change {
	t.Helper()
	id := fmt.Sprintf("r%d", commitIDs.Add(1))
	switch table {
	case TableTasks:
		return UpsertChange(Task{ID: id, ProjectID: "p"}.RowWrite(t, 1))
	case TableNotes:
		return UpsertChange(Note{ID: id, ProjectID: "p", TeamID: "t"}.RowWrite(t, 1))
	}
	t.Fatalf("sourceChange: unknown table %q", table)
	return store.Change{}
}

// tryAppend appends a commit of one change to each table in its own Write.
func tryAppend(t *testing.T, s store.Store, partition string, tables ...string) (int64, error) {
	t.Helper()
	changes := make([]store.Change, len(tables))
	for i, table := range tables {
		changes[i] = sourceChange(t, table)
	}
	var seq int64
	err := s.Write(t.Context(), partition, func(ctx context.Context, tx store.WriteTx) error {
		var err error
		seq, err = tx.AppendCommit(ctx, newCommit(changes...))
		return err
	})
	return seq, err
}

// mustAppend is tryAppend that fails the test on an error.
func mustAppend(t *testing.T, s store.Store, partition string, tables ...string) int64 {
	t.Helper()
	seq, err := tryAppend(t, s, partition, tables...)
	if err != nil {
		t.Fatalf("append to %q: %v", partition, err)
	}
	return seq
}

func maxSeq(t *testing.T, s store.Store, partition string) int64 {
	t.Helper()
	p, err := s.Partition(t.Context(), partition)
	if err != nil {
		t.Fatalf("Partition(%q): %v", partition, err)
	}
	return p.MaxCommitSeq
}

// wantFenceRejected wants an append to the partition by s refused by the
// writer fence, consuming no sequence.
func wantFenceRejected(t *testing.T, s store.Store, partition string) {
	t.Helper()
	before := maxSeq(t, s, partition)
	seq, err := tryAppend(t, s, partition, TableTasks)
	if code := store.ErrorCode(err); code != store.CodeWriterFenceRejected {
		t.Errorf("append to %q by an older writer = %d, %v; want code %s", partition, seq, err, store.CodeWriterFenceRejected)
	}
	if after := maxSeq(t, s, partition); after != before {
		t.Errorf("MaxCommitSeq of %q after a fenced append = %d, want %d", partition, after, before)
	}
}

func wantCode(t *testing.T, what string, err error, code string) *store.Error {
	t.Helper()
	var se *store.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Errorf("%s = %v, want a *store.Error with code %s", what, err, code)
		return nil
	}
	return se
}

// checkpoint reads one checkpoint through ReadCheckpoints.
func checkpoint(t *testing.T, b store.Barrier, partition, name string) (store.Checkpoint, bool) {
	t.Helper()
	cps, err := b.ReadCheckpoints(t.Context(), partition)
	if err != nil {
		t.Fatalf("ReadCheckpoints(%q): %v", partition, err)
	}
	for _, c := range cps {
		if c.Name == name {
			return c, true
		}
	}
	return store.Checkpoint{}, false
}

func mustCheckpoint(t *testing.T, b store.Barrier, partition, name string) store.Checkpoint {
	t.Helper()
	c, ok := checkpoint(t, b, partition, name)
	if !ok {
		t.Fatalf("ReadCheckpoints(%q) has no checkpoint %q", partition, name)
	}
	return c
}

func wantCheckpoint(t *testing.T, what string, got, want store.Checkpoint) {
	t.Helper()
	if got != want {
		t.Errorf("%s =\n  %+v\nwant\n  %+v", what, got, want)
	}
}

func declare(t *testing.T, b store.Barrier, d store.CheckpointDeclaration, nowMs int64) store.Checkpoint {
	t.Helper()
	c, err := b.DeclareCheckpoint(t.Context(), d, nowMs)
	if err != nil {
		t.Fatalf("DeclareCheckpoint(%+v): %v", d, err)
	}
	return c
}

func claim(t *testing.T, b store.Barrier, partition, name string, nowMs int64) store.Checkpoint {
	t.Helper()
	c, err := b.ClaimCheckpoint(t.Context(), partition, name, nowMs)
	if err != nil {
		t.Fatalf("ClaimCheckpoint(%q, %q): %v", partition, name, err)
	}
	return c
}

func activate(t *testing.T, b store.Barrier, partition, name string, epoch, watermark int64, sources []string, nowMs int64) store.Activation {
	t.Helper()
	a, err := b.ActivateCheckpoint(t.Context(), partition, name, epoch, watermark, sources, nowMs)
	if err != nil {
		t.Fatalf("ActivateCheckpoint(%q, %q, epoch %d, watermark %d, %v): %v", partition, name, epoch, watermark, sources, err)
	}
	return a
}

func wantActivation(t *testing.T, b store.Barrier, partition, name string, epoch, watermark int64, sources []string, nowMs int64, want store.Activation) {
	t.Helper()
	if got := activate(t, b, partition, name, epoch, watermark, sources, nowMs); got != want {
		t.Errorf("ActivateCheckpoint(%q, %q, epoch %d, watermark %d, %v) = %q, want %q", partition, name, epoch, watermark, sources, got, want)
	}
}

var tasksOnly = []string{TableTasks}

// testDeclareRaisesFence: a declaration is stored as declared and raises
// the partition's fence to its version: the declaring store (running that
// version) still appends, an older writer is rejected by the database.
func testDeclareRaisesFence(t *testing.T, open Opener) {
	s := open(t)
	b := barrierOf(t, s)
	old := reopen(t, s)
	if old != nil {
		ensure(t, old, FixtureSchema(t)) // old keeps running version 1
	}
	ensure(t, s, schemaAt(t, 2))
	touch(t, s, "p1", "p2")
	if old != nil {
		mustAppend(t, old, "p1", TableTasks) // no fence yet
	}
	got := declare(t, b, decl("p1", "proj", 2), 5000)
	want := store.Checkpoint{Partition: "p1", Name: "proj", SchemaVersion: 2, State: store.CheckpointDeclared, UpdatedAtMs: 5000}
	wantCheckpoint(t, "DeclareCheckpoint", got, want)
	cps, err := b.ReadCheckpoints(t.Context(), "p1")
	if err != nil || len(cps) != 1 || cps[0] != want {
		t.Errorf("ReadCheckpoints(p1) = %+v, %v; want [%+v]", cps, err, want)
	}
	if cps, err := b.ReadCheckpoints(t.Context(), "p2"); err != nil || len(cps) != 0 {
		t.Errorf("ReadCheckpoints(p2) = %+v, %v; want none", cps, err)
	}
	mustAppend(t, s, "p1", TableTasks) // stamped with version 2
	if old == nil {
		t.Skip(skipNoReopen)
	}
	wantFenceRejected(t, old, "p1")
	mustAppend(t, old, "p2", TableTasks) // the fence is per partition
}

// testFenceNeverLowers: declaring at 3, then at 2, leaves the fence at 3.
func testFenceNeverLowers(t *testing.T, open Opener) {
	s := open(t)
	b := barrierOf(t, s)
	old := reopen(t, s)
	if old != nil {
		ensure(t, old, schemaAt(t, 2))
	}
	ensure(t, s, schemaAt(t, 2))
	touch(t, s, "p1")
	declare(t, b, decl("p1", "a", 3), 1000)
	declare(t, b, decl("p1", "b", 2), 1001)
	// Activating a needs a fence at 3.
	c := claim(t, b, "p1", "a", 2000)
	wantActivation(t, b, "p1", "a", c.OwnerEpoch, 0, tasksOnly, 3000, store.Activated)
	if old == nil {
		t.Skip(skipNoReopen)
	}
	wantFenceRejected(t, old, "p1") // version 2 < 3
}

// testRedeclareKeepsState: declaring an existing checkpoint changes
// nothing, whatever its state.
func testRedeclareKeepsState(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	declare(t, b, decl("p1", "a", 1), 1000)
	c := claim(t, b, "p1", "a", 2000)
	if ok, err := b.AdvanceCheckpoint(e.ctx, "p1", "a", c.OwnerEpoch, 0, 7, 3000); err != nil || !ok {
		t.Fatalf("AdvanceCheckpoint by the owner = %v, %v; want true", ok, err)
	}
	want := store.Checkpoint{Partition: "p1", Name: "a", SchemaVersion: 1, State: store.CheckpointBackfilling,
		OwnerEpoch: c.OwnerEpoch, ObservedRows: 7, UpdatedAtMs: 3000}
	wantCheckpoint(t, "DeclareCheckpoint of a backfilling checkpoint", declare(t, b, decl("p1", "a", 1), 9000), want)
	wantCheckpoint(t, "checkpoint after re-declaring", mustCheckpoint(t, b, "p1", "a"), want)

	wantActivation(t, b, "p1", "a", c.OwnerEpoch, 0, tasksOnly, 4000, store.Activated)
	want.State, want.UpdatedAtMs = store.CheckpointActivated, 4000
	wantCheckpoint(t, "DeclareCheckpoint of an activated checkpoint", declare(t, b, decl("p1", "a", 1), 9001), want)
	wantCheckpoint(t, "checkpoint after re-declaring", mustCheckpoint(t, b, "p1", "a"), want)
}

// testClaim: a claim gives a new owner epoch and moves declared to
// backfilling; an undeclared checkpoint cannot be claimed, an activated one
// keeps its epoch.
func testClaim(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	e.touch("p2")
	_, err := b.ClaimCheckpoint(e.ctx, "p1", "a", 1000)
	wantCode(t, "ClaimCheckpoint of an undeclared checkpoint", err, store.CodeCheckpointNotDeclared)
	declare(t, b, decl("p1", "a", 1), 1000)
	_, err = b.ClaimCheckpoint(e.ctx, "p2", "a", 1000)
	wantCode(t, "ClaimCheckpoint in a partition that did not declare it", err, store.CodeCheckpointNotDeclared)

	c1 := claim(t, b, "p1", "a", 2000)
	want := store.Checkpoint{Partition: "p1", Name: "a", SchemaVersion: 1, State: store.CheckpointBackfilling, OwnerEpoch: 1, UpdatedAtMs: 2000}
	wantCheckpoint(t, "first ClaimCheckpoint", c1, want)
	wantCheckpoint(t, "checkpoint after the first claim", mustCheckpoint(t, b, "p1", "a"), want)
	c2 := claim(t, b, "p1", "a", 3000)
	want.OwnerEpoch, want.UpdatedAtMs = 2, 3000
	wantCheckpoint(t, "second ClaimCheckpoint", c2, want)

	wantActivation(t, b, "p1", "a", c2.OwnerEpoch, 0, tasksOnly, 4000, store.Activated)
	want.State, want.UpdatedAtMs = store.CheckpointActivated, 4000
	if got, err := b.ClaimCheckpoint(e.ctx, "p1", "a", 5000); err == nil && got != want {
		t.Errorf("ClaimCheckpoint of an activated checkpoint = %+v; want an error or %+v", got, want)
	}
	wantCheckpoint(t, "checkpoint after claiming it activated", mustCheckpoint(t, b, "p1", "a"), want)
}

// testClaimConcurrent: concurrent claimers get distinct epochs.
func testClaimConcurrent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	declare(t, b, decl("p1", "a", 1), 1000)
	const n = 8
	epochs := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := b.ClaimCheckpoint(e.ctx, "p1", "a", 2000)
			epochs[i], errs[i] = c.OwnerEpoch, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent ClaimCheckpoint: %v", err)
	}
	slices.Sort(epochs)
	if want := seqRange(1, n); !slices.Equal(epochs, want) {
		t.Errorf("epochs of %d concurrent claims = %v, want %v", n, epochs, want)
	}
	if c := mustCheckpoint(t, b, "p1", "a"); c.OwnerEpoch != n {
		t.Errorf("OwnerEpoch after %d claims = %d", n, c.OwnerEpoch)
	}
}

// testStaleOwner: of two claimers, only the newest epoch advances and
// activates; the stale one writes nothing.
func testStaleOwner(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	declare(t, b, decl("p1", "a", 1), 1000)
	c1 := claim(t, b, "p1", "a", 2000)
	c2 := claim(t, b, "p1", "a", 3000)
	if ok, err := b.AdvanceCheckpoint(e.ctx, "p1", "a", c1.OwnerEpoch, 5, 50, 4000); err != nil || ok {
		t.Errorf("AdvanceCheckpoint by a superseded owner = %v, %v; want false, nil", ok, err)
	}
	wantCheckpoint(t, "checkpoint after a stale advance", mustCheckpoint(t, b, "p1", "a"), c2)
	if ok, err := b.AdvanceCheckpoint(e.ctx, "p1", "missing", c2.OwnerEpoch, 5, 50, 4000); err != nil || ok {
		t.Errorf("AdvanceCheckpoint of an undeclared checkpoint = %v, %v; want false, nil", ok, err)
	}
	if ok, err := b.AdvanceCheckpoint(e.ctx, "p1", "a", c2.OwnerEpoch, 5, 50, 5000); err != nil || !ok {
		t.Errorf("AdvanceCheckpoint by the owner = %v, %v; want true, nil", ok, err)
	}
	want := c2
	want.Watermark, want.ObservedRows, want.UpdatedAtMs = 5, 50, 5000
	wantCheckpoint(t, "checkpoint after the owner's advance", mustCheckpoint(t, b, "p1", "a"), want)

	wantActivation(t, b, "p1", "a", c1.OwnerEpoch, 5, tasksOnly, 6000, store.Stale)
	wantCheckpoint(t, "checkpoint after a stale activation", mustCheckpoint(t, b, "p1", "a"), want)
	wantActivation(t, b, "p1", "a", c2.OwnerEpoch, 5, tasksOnly, 7000, store.Activated)
}

var errSuperseded = errors.New("storetest: superseded")

// testStaleOwnerInTx: BarrierTx.AdvanceCheckpoint commits with the batch
// that carries it, and a superseded owner's batch writes nothing.
func testStaleOwnerInTx(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	declare(t, b, decl("p1", "a", 1), 1000)
	c1 := claim(t, b, "p1", "a", 2000)
	c2 := claim(t, b, "p1", "a", 3000)
	batch := func(id string, epoch int64, fail error) (int64, error) {
		w := Task{ID: id, ProjectID: "p1"}.RowWrite(t, 1)
		var seq int64
		err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
			btx, ok := tx.(store.BarrierTx)
			if !ok {
				return errors.New("the write transaction of a store.Barrier does not implement store.BarrierTx")
			}
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			var err error
			if seq, err = tx.AppendCommit(ctx, newCommit(UpsertChange(w))); err != nil {
				return err
			}
			ok, err = btx.AdvanceCheckpoint(ctx, "a", epoch, seq, 1, 4000)
			if err != nil {
				return err
			}
			if !ok {
				return errSuperseded
			}
			return fail
		})
		return seq, err
	}

	if _, err := batch("stale", c1.OwnerEpoch, nil); !errors.Is(err, errSuperseded) {
		t.Fatalf("batch of a superseded owner = %v, want its CAS to fail", err)
	}
	e.wantNoRow("p1", TableTasks, "stale")
	if got := e.partition("p1").MaxCommitSeq; got != 0 {
		t.Errorf("MaxCommitSeq after a superseded batch = %d, want 0", got)
	}
	wantCheckpoint(t, "checkpoint after a superseded batch", mustCheckpoint(t, b, "p1", "a"), c2)

	if _, err := batch("failed", c2.OwnerEpoch, errBoom); !errors.Is(err, errBoom) {
		t.Fatalf("failed batch of the owner = %v, want %v", err, errBoom)
	}
	wantCheckpoint(t, "checkpoint after a failed batch", mustCheckpoint(t, b, "p1", "a"), c2)

	seq, err := batch("kept", c2.OwnerEpoch, nil)
	if err != nil {
		t.Fatalf("batch of the owner: %v", err)
	}
	e.row("p1", TableTasks, "kept")
	want := c2
	want.Watermark, want.ObservedRows, want.UpdatedAtMs = seq, 1, 4000
	wantCheckpoint(t, "checkpoint after the owner's batch", mustCheckpoint(t, b, "p1", "a"), want)
}

// testActivateWithoutFence: a checkpoint whose partition has no fence is
// not activated.
func testActivateWithoutFence(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	rx := rawExecer(t, e.s)
	e.touch("p1")
	declare(t, b, decl("p1", "a", 1), 1000)
	c := claim(t, b, "p1", "a", 2000)
	execScript(t, rx, `DELETE FROM sync_writer_fence`)
	_, err := b.ActivateCheckpoint(e.ctx, "p1", "a", c.OwnerEpoch, 0, tasksOnly, 3000)
	wantCode(t, "ActivateCheckpoint without a fence", err, store.CodeCheckpointFenceMissing)
	wantCheckpoint(t, "checkpoint after a refused activation", mustCheckpoint(t, b, "p1", "a"), c)
}

// testActivateStaleThenClean: a source change above the watermark makes
// the activation stale; changes to other tables or partitions do not;
// activation is one-way.
func testActivateStaleThenClean(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	e.touch("p2")
	declare(t, b, decl("p1", "proj", 1), 1000)
	c := claim(t, b, "p1", "proj", 2000)
	s1 := mustAppend(t, e.s, "p1", TableTasks)
	mustAppend(t, e.s, "p1", TableNotes)
	cov, err := b.SourceCoverageSeq(e.ctx, "p1", tasksOnly)
	if err != nil || cov != s1 {
		t.Fatalf("SourceCoverageSeq = %d, %v; want %d", cov, err, s1)
	}
	s3 := mustAppend(t, e.s, "p1", TableTasks)
	wantActivation(t, b, "p1", "proj", c.OwnerEpoch, cov, tasksOnly, 3000, store.Stale)
	wantCheckpoint(t, "checkpoint after a stale activation", mustCheckpoint(t, b, "p1", "proj"), c)

	mustAppend(t, e.s, "p2", TableTasks)
	mustAppend(t, e.s, "p1", TableNotes)
	wantActivation(t, b, "p1", "proj", c.OwnerEpoch, s3, tasksOnly, 4000, store.Activated)
	want := c
	want.State, want.Watermark, want.UpdatedAtMs = store.CheckpointActivated, s3, 4000
	wantCheckpoint(t, "checkpoint after activation", mustCheckpoint(t, b, "p1", "proj"), want)

	wantActivation(t, b, "p1", "proj", c.OwnerEpoch, s3, tasksOnly, 5000, store.Stale)
	wantCheckpoint(t, "checkpoint after re-activation", mustCheckpoint(t, b, "p1", "proj"), want)
}

// testActivateUnverifiable: when the history above the watermark is
// pruned, activation cannot prove that no source changed.
func testActivateUnverifiable(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	declare(t, b, decl("p1", "proj", 1), 1000)
	c := claim(t, b, "p1", "proj", 2000)
	mustAppend(t, e.s, "p1", TableTasks)
	mustAppend(t, e.s, "p1", TableTasks)
	mustAppend(t, e.s, "p1", TableNotes)
	e.prune("p1", epochOf("p1"), 2)
	wantActivation(t, b, "p1", "proj", c.OwnerEpoch, 1, tasksOnly, 3000, store.Unverifiable)
	wantCheckpoint(t, "checkpoint after an unverifiable activation", mustCheckpoint(t, b, "p1", "proj"), c)
	wantActivation(t, b, "p1", "proj", c.OwnerEpoch, 2, tasksOnly, 4000, store.Activated)
}

// testSourceCoverageSeq: the newest commit that changed a source table,
// in the partition.
func testSourceCoverageSeq(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	e.touch("p2")
	cov := func(partition string, sources []string, want int64) {
		t.Helper()
		if got, err := b.SourceCoverageSeq(e.ctx, partition, sources); err != nil || got != want {
			t.Errorf("SourceCoverageSeq(%q, %v) = %d, %v; want %d", partition, sources, got, err, want)
		}
	}
	cov("p1", tasksOnly, 0)
	mustAppend(t, e.s, "p1", TableTasks)             // 1
	mustAppend(t, e.s, "p1", TableNotes)             // 2
	mustAppend(t, e.s, "p1", TableTasks)             // 3
	mustAppend(t, e.s, "p1", TableNotes)             // 4
	mustAppend(t, e.s, "p2", TableNotes, TableNotes) // p2: 1
	mustAppend(t, e.s, "p2", TableNotes)             // p2: 2
	mustAppend(t, e.s, "p2", TableNotes, TableTasks) // p2: 3
	mustAppend(t, e.s, "p2", TableNotes, TableNotes) // p2: 4
	cov("p1", tasksOnly, 3)
	cov("p1", []string{TableNotes}, 4)
	cov("p1", []string{TableTasks, TableNotes}, 4)
	cov("p1", nil, 0)
	cov("p2", tasksOnly, 3)
	cov("p3", tasksOnly, 0)
}

// testHasSourceChangesAbove: clean, changed, and unverifiable once the
// horizon passed the sequence.
func testHasSourceChangesAbove(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	e.touch("p2")
	above := func(partition string, sources []string, seq int64, want store.Coverage) {
		t.Helper()
		if got, err := b.HasSourceChangesAbove(e.ctx, partition, sources, seq); err != nil || got != want {
			t.Errorf("HasSourceChangesAbove(%q, %v, %d) = %q, %v; want %q", partition, sources, seq, got, err, want)
		}
	}
	notes := []string{TableNotes}
	above("p1", tasksOnly, 0, store.CoverageClean)
	mustAppend(t, e.s, "p1", TableTasks) // 1
	mustAppend(t, e.s, "p1", TableNotes) // 2
	mustAppend(t, e.s, "p2", TableTasks) // p2: 1
	mustAppend(t, e.s, "p2", TableTasks) // p2: 2
	above("p1", tasksOnly, 0, store.CoverageChanged)
	above("p1", tasksOnly, 1, store.CoverageClean)
	above("p1", tasksOnly, 2, store.CoverageClean)
	above("p1", notes, 1, store.CoverageChanged)
	above("p1", notes, 2, store.CoverageClean)
	e.prune("p1", epochOf("p1"), 1)
	above("p1", tasksOnly, 0, store.CoverageUnverifiable)
	above("p1", notes, 0, store.CoverageChanged)
	above("p1", tasksOnly, 1, store.CoverageClean)
	above("p2", tasksOnly, 1, store.CoverageChanged)
	above("p3", tasksOnly, 0, store.CoverageClean)
}

func sortedRefs(refs []store.CheckpointRef) []store.CheckpointRef {
	out := slices.Clone(refs)
	slices.SortFunc(out, func(a, b store.CheckpointRef) int {
		return strings.Compare(a.Partition+"\x00"+a.Name, b.Partition+"\x00"+b.Name)
	})
	return out
}

// testServeGate: the stored version, the partition's epoch, and every
// incomplete checkpoint at the running version in any partition.
func testServeGate(t *testing.T, open Opener) {
	s := open(t)
	b := barrierOf(t, s)
	ctx := t.Context()
	gate := func(partition string, running int32, want store.ServeGate) {
		t.Helper()
		got, err := b.ReadServeGate(ctx, partition, running)
		if err != nil {
			t.Errorf("ReadServeGate(%q, %d): %v", partition, running, err)
			return
		}
		got.Pending = sortedRefs(got.Pending)
		if got.StoredSchemaVersion != want.StoredSchemaVersion || got.LogEpoch != want.LogEpoch || !slices.Equal(got.Pending, want.Pending) ||
			got.WriterFence != want.WriterFence {
			t.Errorf("ReadServeGate(%q, %d) = %+v, want %+v", partition, running, got, want)
		}
	}
	gate("p1", 1, store.ServeGate{})
	ensure(t, s, FixtureSchema(t))
	gate("p1", 1, store.ServeGate{StoredSchemaVersion: 1})
	touch(t, s, "p1")
	gate("p1", 1, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: epochOf("p1")})

	declare(t, b, decl("p1", "a", 1), 1000)
	declare(t, b, decl("p2", "b", 1), 1000)
	declare(t, b, decl("p1", "c", 2), 1000)
	both := []store.CheckpointRef{{Partition: "p1", Name: "a"}, {Partition: "p2", Name: "b"}}
	gate("p1", 1, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: epochOf("p1"), Pending: both, WriterFence: 2})
	gate("p2", 1, store.ServeGate{StoredSchemaVersion: 1, Pending: both, WriterFence: 1})
	gate("p3", 1, store.ServeGate{StoredSchemaVersion: 1, Pending: both})
	gate("p1", 2, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: epochOf("p1"), Pending: []store.CheckpointRef{{Partition: "p1", Name: "c"}}, WriterFence: 2})
	gate("p1", 3, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: epochOf("p1"), WriterFence: 2})

	c := claim(t, b, "p2", "b", 2000)
	wantActivation(t, b, "p2", "b", c.OwnerEpoch, 0, tasksOnly, 3000, store.Activated)
	one := []store.CheckpointRef{{Partition: "p1", Name: "a"}}
	gate("p1", 1, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: epochOf("p1"), Pending: one, WriterFence: 2})
	if err := s.RotateLogEpoch(ctx, "p1", "rotated", 4000); err != nil {
		t.Fatalf("RotateLogEpoch: %v", err)
	}
	gate("p1", 1, store.ServeGate{StoredSchemaVersion: 1, LogEpoch: "rotated", Pending: one, WriterFence: 2})

	err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		btx, ok := tx.(store.BarrierTx)
		if !ok {
			return errors.New("the write transaction of a store.Barrier does not implement store.BarrierTx")
		}
		g, err := btx.ServeGate(ctx, 1)
		if err != nil {
			return err
		}
		if g.StoredSchemaVersion != 1 || g.LogEpoch != "rotated" || !slices.Equal(sortedRefs(g.Pending), one) || g.WriterFence != 2 {
			t.Errorf("BarrierTx.ServeGate(1) = %+v, want stored 1, epoch rotated, pending %v", g, one)
		}
		return nil
	})
	if err != nil {
		t.Errorf("Write: %v", err)
	}
}

// testEnsureBarrier: EnsureSchemaWith refuses while a checkpoint at the
// running version is incomplete and not declared by the caller.
func testEnsureBarrier(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	v1 := FixtureSchema(t)
	declare(t, b, decl("p1", "a", 1), 1000)
	declare(t, b, decl("p1", "z", 2), 1000) // another version does not count
	refused := func(what string, decls []store.CheckpointDeclaration) {
		t.Helper()
		wantCode(t, what, b.EnsureSchemaWith(e.ctx, v1, decls), store.CodeCheckpointIncomplete)
	}
	refused("EnsureSchemaWith(no declarations)", nil)
	refused("EnsureSchemaWith(another name)", []store.CheckpointDeclaration{decl("p1", "b", 1)})
	refused("EnsureSchemaWith(another partition)", []store.CheckpointDeclaration{decl("p2", "a", 1)})
	wantCode(t, "EnsureSchema", e.s.EnsureSchema(e.ctx, v1), store.CodeCheckpointIncomplete)
	if err := b.EnsureSchemaWith(e.ctx, v1, []store.CheckpointDeclaration{decl("p1", "a", 1)}); err != nil {
		t.Errorf("EnsureSchemaWith(declared) = %v", err)
	}
	c := claim(t, b, "p1", "a", 2000)
	refused("EnsureSchemaWith(no declarations) while backfilling", nil)
	wantActivation(t, b, "p1", "a", c.OwnerEpoch, 0, tasksOnly, 3000, store.Activated)
	if err := e.s.EnsureSchema(e.ctx, v1); err != nil {
		t.Errorf("EnsureSchema after activation = %v", err)
	}
	wantMarker(t, e.s, 1, v1.Layout())
}

// testBumpBarrier: a checkpoint declared ahead for the next version holds
// the bump back, which then changes nothing.
func testBumpBarrier(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b := barrierOf(t, e.s)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1", Title: ptr("kept")}.RowWrite(t, 1)
	e.upsert("p1", w)
	declare(t, b, decl("p1", "x", 2), 1000)
	v2 := grownSchema(t)
	wantCode(t, "EnsureSchemaWith(version 2, no declarations)", b.EnsureSchemaWith(e.ctx, v2, nil), store.CodeCheckpointIncomplete)
	wantMarker(t, e.s, 1, FixtureSchema(t).Layout())
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, w.Row) {
		t.Errorf("row after a refused bump = %s, want %s", fmtRow(got), fmtRow(w.Row))
	}
	if err := b.EnsureSchemaWith(e.ctx, v2, []store.CheckpointDeclaration{decl("p1", "x", 2)}); err != nil {
		t.Fatalf("EnsureSchemaWith(version 2, declared) = %v", err)
	}
	wantMarker(t, e.s, 2, v2.Layout())
}

// testBumpInstallsDeclarations: a schema bump installs the declarations
// and raises the fence of every partition to the new version, never
// lowering one.
func testBumpInstallsDeclarations(t *testing.T, open Opener) {
	s := open(t)
	b := barrierOf(t, s)
	ctx := t.Context()
	ensure(t, s, FixtureSchema(t))
	old := reopen(t, s)
	if old != nil {
		ensure(t, old, FixtureSchema(t))
	}
	touch(t, s, "p1", "p2", "p3")
	for _, p := range []string{"p1", "p2", "p3"} {
		mustAppend(t, s, p, TableTasks)
	}
	declare(t, b, decl("p2", "early", 3), 1000)
	v2 := schemaAt(t, 2)
	if err := b.EnsureSchemaWith(ctx, v2, []store.CheckpointDeclaration{decl("p1", "proj", 2)}); err != nil {
		t.Fatalf("EnsureSchemaWith(version 2, declared): %v", err)
	}
	wantMarker(t, s, 2, v2.Layout())
	c := mustCheckpoint(t, b, "p1", "proj")
	if c.SchemaVersion != 2 || c.State != store.CheckpointDeclared || c.OwnerEpoch != 0 || c.Watermark != 0 {
		t.Errorf("installed checkpoint = %+v, want declared at version 2", c)
	}
	g, err := b.ReadServeGate(ctx, "p1", 2)
	if err != nil || !slices.Equal(g.Pending, []store.CheckpointRef{{Partition: "p1", Name: "proj"}}) || g.StoredSchemaVersion != 2 {
		t.Errorf("ReadServeGate(p1, 2) = %+v, %v; want stored 2, pending p1/proj", g, err)
	}
	mustAppend(t, s, "p1", TableTasks) // s runs version 2
	mustAppend(t, s, "p3", TableTasks)
	wantFenceRejected(t, s, "p2") // the fence at 3 was not lowered to 2
	cl := claim(t, b, "p1", "proj", 2000)
	wantActivation(t, b, "p1", "proj", cl.OwnerEpoch, 0, nil, 3000, store.Activated)
	if old == nil {
		t.Skip(skipNoReopen)
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		wantFenceRejected(t, old, p)
	}
}

// testBumpRewritesPayloads: a bump that appends a column re-encodes the
// stored rows and the logged changes of the table with a NULL for it.
func testBumpRewritesPayloads(t *testing.T, open Opener) {
	e := newEnv(t, open)
	barrierOf(t, e.s)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1", Title: ptr("kept"), N: ptr(int64(7)), Blob: []byte{1, 2}}.RowWrite(t, 3)
	gone := Task{ID: "t2", ProjectID: "p1"}.RowWrite(t, 1)
	note := Note{ID: "n1", ProjectID: "p1", TeamID: "t", Body: ptr("b")}.RowWrite(t, 1)
	e.upsert("p1", w)
	e.upsert("p1", gone)
	e.remove("p1", gone.Row)
	e.upsert("p1", note)
	v2 := grownSchema(t)
	if err := e.s.EnsureSchema(e.ctx, v2); err != nil {
		t.Fatalf("EnsureSchema(version 2): %v", err)
	}
	grown := NewRowWrite(t, v2, TableTasks, append(slices.Clone(w.Values), wire.Value{Null: true}), 3)
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, grown.Row) {
		t.Errorf("row after the bump = %s, want %s", fmtRow(got), fmtRow(grown.Row))
	}
	if got := e.row("p1", TableNotes, "n1"); !sameRow(got, note.Row) {
		t.Errorf("row of an unchanged table after the bump = %s, want %s", fmtRow(got), fmtRow(note.Row))
	}
	commits, err := e.s.ReadCommits(e.ctx, "p1", 0, 4, 10)
	if err != nil || len(commits) != 4 {
		t.Fatalf("ReadCommits = %d commits, %v; want 4", len(commits), err)
	}
	want := []store.Change{UpsertChange(grown), UpsertChange(NewRowWrite(t, v2, TableTasks, append(slices.Clone(gone.Values), wire.Value{Null: true}), 1)),
		DeleteChange(gone.Row), UpsertChange(note)}
	for i, c := range commits {
		if len(c.Changes) != 1 || !sameChange(c.Changes[0], want[i]) {
			t.Errorf("commit %d after the bump = %+v, want the change %+v", c.Seq, c.Changes, want[i])
		}
	}
	done := NewRowWrite(t, v2, TableTasks, []wire.Value{{Str: "t3"}, {Str: "p1"}, {Null: true}, {Null: true}, {Null: true}, {Bool: true}}, 1)
	e.upsert("p1", done)
	if got := e.row("p1", TableTasks, "t3"); !sameRow(got, done.Row) {
		t.Errorf("row written at version 2 = %s, want %s", fmtRow(got), fmtRow(done.Row))
	}
}

// The tasks table rebuilt with one damage each. The column types are
// SQLite's; the rebuilds that fail before any dialect-specific column is
// looked at are portable.
const (
	tasksWrongType = `DROP TABLE "tasks"; CREATE TABLE "tasks" ("_sync_partition" INTEGER NOT NULL, "_sync_row_id" TEXT NOT NULL,
 "id" TEXT, "project_id" TEXT, "title" TEXT, "n" INTEGER, "blob" TEXT, "_sync_server_version" INTEGER NOT NULL,
 "_sync_scopes" TEXT NOT NULL, "_sync_payload" TEXT NOT NULL, "_sync_column_versions" TEXT,
 PRIMARY KEY ("_sync_partition", "_sync_row_id"))`
	tasksNullableRowID = `DROP TABLE "tasks"; CREATE TABLE "tasks" ("_sync_partition" TEXT NOT NULL, "_sync_row_id" TEXT,
 "id" TEXT, "project_id" TEXT, "title" TEXT, "n" INTEGER, "blob" TEXT, "_sync_server_version" INTEGER NOT NULL,
 "_sync_scopes" TEXT NOT NULL, "_sync_payload" TEXT NOT NULL, "_sync_column_versions" TEXT)`
	tasksSwappedKeySQLite = `DROP TABLE "tasks"; CREATE TABLE "tasks" ("_sync_partition" TEXT NOT NULL, "_sync_row_id" TEXT NOT NULL,
 "id" TEXT, "project_id" TEXT, "title" TEXT, "n" INTEGER, "blob" BLOB, "_sync_server_version" INTEGER NOT NULL,
 "_sync_scopes" TEXT NOT NULL, "_sync_payload" BLOB NOT NULL, "_sync_column_versions" BLOB,
 PRIMARY KEY ("_sync_row_id", "_sync_partition"))`
	tasksSwappedKeyPostgres = `ALTER TABLE "tasks" DROP CONSTRAINT "tasks_pkey";
 ALTER TABLE "tasks" ADD PRIMARY KEY ("_sync_row_id", "_sync_partition")`
)

// testPhysicalLayout: a same-version database whose tables disagree with
// the storage layout is refused with structured details, and the refusal
// writes nothing (a second open is refused the same way).
func testPhysicalLayout(t *testing.T, open Opener) {
	tests := []struct {
		name    string
		scripts []string
		details map[string]any // nil: accepted
	}{
		{"missing table", []string{`DROP TABLE "tasks"`},
			map[string]any{"table": TableTasks, "reason": "missing_table"}},
		{"missing column", []string{`ALTER TABLE "tasks" DROP COLUMN "title"`},
			map[string]any{"table": TableTasks, "column": "title", "reason": "missing_column"}},
		{"meta column type", []string{tasksWrongType},
			map[string]any{"table": TableTasks, "column": "_sync_partition", "reason": "type", "expected": "TEXT", "actual": "INTEGER"}},
		{"meta column nullability", []string{tasksNullableRowID},
			map[string]any{"table": TableTasks, "column": "_sync_row_id", "reason": "nullability", "expected": "not_null", "actual": "nullable"}},
		{"primary key", []string{tasksSwappedKeySQLite, tasksSwappedKeyPostgres},
			map[string]any{"table": TableTasks, "reason": "primary_key"}},
		{"extra column", []string{`ALTER TABLE "tasks" ADD COLUMN "extra" TEXT`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, open)
			barrierOf(t, e.s)
			rx := rawExecer(t, e.s)
			e.touch("p1")
			e.upsert("p1", Task{ID: "t1", ProjectID: "p1", Title: ptr("x")}.RowWrite(t, 1))
			execScript(t, rx, tt.scripts...)
			v1 := FixtureSchema(t)
			first := e.s.EnsureSchema(e.ctx, v1)
			if tt.details == nil {
				if first != nil {
					t.Errorf("EnsureSchema after %s = %v, want nil", tt.name, first)
				}
				return
			}
			se := wantCode(t, "EnsureSchema after "+tt.name, first, store.CodePhysicalLayoutMismatch)
			if se != nil {
				wantDetails(t, se.Details, tt.details)
			}
			second := e.s.EnsureSchema(e.ctx, v1)
			if se2 := wantCode(t, "second EnsureSchema after "+tt.name, second, store.CodePhysicalLayoutMismatch); se != nil && se2 != nil &&
				!maps.Equal(detailStrings(se.Details), detailStrings(se2.Details)) {
				t.Errorf("second refusal details = %v, first %v: the refusal changed the database", se2.Details, se.Details)
			}
			wantMarker(t, e.s, 1, v1.Layout())
		})
	}
}

func detailStrings(d map[string]any) map[string]string {
	out := make(map[string]string, len(d))
	for k, v := range d {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// wantDetails compares details with want; a column is required only
// where want names one, expected and actual compare case-insensitively
// (catalogs spell types their own way).
func wantDetails(t *testing.T, got, want map[string]any) {
	t.Helper()
	g := detailStrings(got)
	for k, v := range detailStrings(want) {
		ok := g[k] == v
		if k == "expected" || k == "actual" {
			ok = strings.EqualFold(g[k], v)
		}
		if !ok {
			t.Errorf("details[%q] = %q, want %q (details %v)", k, g[k], v, got)
		}
	}
	if _, ok := want["column"]; !ok && want["reason"] != "primary_key" {
		if c, has := got["column"]; has {
			t.Errorf("details name column %v for a %v refusal", c, want["reason"])
		}
	}
	for _, k := range []string{"table", "reason"} {
		if _, ok := got[k]; !ok {
			t.Errorf("details lack %q: %v", k, got)
		}
	}
}
