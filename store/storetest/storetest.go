// Package storetest is the conformance suite of the storage contract in
// package store. Every storage driver runs it against fresh databases:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t testing.TB) store.Store {
//			s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "sync.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() {
//				if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
//					t.Error(err)
//				}
//			})
//			return s
//		})
//	}
//
// [Run] runs every area as parallel subtests; RunSchema, RunPartitions and
// the other Run functions run one area each. Every test opens its own store
// through the [Opener] and so starts from an empty database. The tests
// check what the doc comments of [store.Store] and [store.WriteTx] promise,
// against expectations written out in the tests (the scope tests compare
// with a reference model and a filter of their own, never with
// [store.MatchScopes]).
//
// Tests register a partition with TouchPartition before they write to it.
// Where the doc comments leave a choice, the suite holds drivers to one
// reading:
//
//   - TouchPartition returns the whole [store.Partition], counters
//     included.
//   - ReadCommitWindow leaves out commits with no matching change; with a
//     limit it fills the page greedily (it stops only before a commit that
//     would exceed the limit), and it reports Complete whenever it returned
//     every matching commit with changes to spare under the limit.
//   - ScanRows orders row ids bytewise (Postgres: COLLATE "C").
//   - A failed Candidate undoes everything its function did, appended
//     commits (and their sequences) and push results included.
//   - A later delete moves a row's tombstone to its commit; an upsert
//     leaves the tombstone to ClearTombstone.
//   - Declared unique indexes are per partition; a violation names the
//     declared or the physical index.
//   - AdvanceClientCursor sets UpdatedAtMs to the advance's AtMs.
//   - Push-result details compare as JSON values (a JSONB column may
//     reformat them); a conflict's ConflictColumns keep their presence.
//   - Calls that touch rows before EnsureSchema fail with
//     [store.ErrNoSchema]; tables outside the schema with
//     [store.ErrUnknownTable].
//   - A schema bump that appends columns re-encodes the logged upserts of
//     the table as well as its rows (the pull serves them verbatim), and
//     raises the fence of every partition that has commits.
//   - ClaimCheckpoint of an activated checkpoint fails or returns it
//     unchanged; either way its epoch stays.
//   - The same-version physical check refuses in this order: a missing
//     table, a missing column, the storage columns' type then nullability
//     (in storage-column order), the primary key.
//
// [BenchmarkAppend] measures commit throughput with a fixed number of
// writers.
package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Opener returns a store on a fresh, empty database (a new SQLite file, a
// new Postgres schema). It registers the store's cleanup on t. A test may
// close the store itself, so the cleanup must accept a Close that reports
// [store.ErrClosed].
type Opener func(t testing.TB) store.Store

// testCase is one test of an area; it opens its own store.
type testCase struct {
	name string
	run  func(t *testing.T, open Opener)
}

// area is a named group of tests with its exported entry point.
type area struct {
	name string
	run  func(t *testing.T, open Opener)
}

var areas = []area{
	{"Schema", RunSchema},
	{"Partitions", RunPartitions},
	{"Append", RunAppend},
	{"Rows", RunRows},
	{"Scopes", RunScopes},
	{"PushResults", RunPushResults},
	{"Clients", RunClients},
	{"DeferredClients", RunDeferredClients},
	{"Prune", RunPrune},
	{"Epoch", RunEpoch},
	{"Transactions", RunTransactions},
	{"Lookups", RunLookups},
	{"Barrier", RunBarrier},
	{"Query", RunQuery},
	{"Leases", RunLeases},
	{"Segments", RunSegments},
	{"Blobs", RunBlobs},
	{"Reactions", RunReactions},
	{"RequestState", RunRequestState},
	{"WindowBatch", RunWindowBatch},
}

// Run runs every area of the suite as parallel subtests.
func Run(t *testing.T, open Opener) {
	for _, a := range areas {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			a.run(t, open)
		})
	}
}

// runCases runs the tests of one area as parallel subtests.
func runCases(t *testing.T, open Opener, cases []testCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, open)
		})
	}
}

// errBoom is the error the tests' write functions fail with.
var errBoom = errors.New("storetest: boom")

// env is one test's store, with the fixture schema ensured.
type env struct {
	t   *testing.T
	ctx context.Context
	s   store.Store
}

// newEnv opens a store and ensures the fixture schema on it.
func newEnv(t *testing.T, open Opener) *env {
	t.Helper()
	e := &env{t: t, ctx: t.Context(), s: open(t)}
	if err := e.s.EnsureSchema(e.ctx, FixtureSchema(t)); err != nil {
		t.Fatalf("EnsureSchema: %v", err)
	}
	return e
}

// epochOf is the log epoch the tests register a partition with.
func epochOf(partition string) string { return "epoch-" + partition }

// touch registers the partition with epochOf(partition) at time 1000.
func (e *env) touch(partition string) store.Partition {
	e.t.Helper()
	p, err := e.s.TouchPartition(e.ctx, partition, 1000, epochOf(partition))
	if err != nil {
		e.t.Fatalf("TouchPartition(%q): %v", partition, err)
	}
	return p
}

// partition returns the partition's state.
func (e *env) partition(partition string) store.Partition {
	e.t.Helper()
	p, err := e.s.Partition(e.ctx, partition)
	if err != nil {
		e.t.Fatalf("Partition(%q): %v", partition, err)
	}
	return p
}

// write runs fn in a Write and fails the test when it fails.
func (e *env) write(partition string, fn func(ctx context.Context, tx store.WriteTx) error) {
	e.t.Helper()
	if err := e.s.Write(e.ctx, partition, fn); err != nil {
		e.t.Fatalf("Write(%q): %v", partition, err)
	}
}

// upsert writes the row and appends its one-change commit; it returns the
// commit's sequence.
func (e *env) upsert(partition string, w store.RowWrite) int64 {
	e.t.Helper()
	return ApplyUpsert(e.t, e.s, partition, w)
}

// remove deletes the row and appends its one-change commit; it returns the
// commit's sequence.
func (e *env) remove(partition string, r store.Row) int64 {
	e.t.Helper()
	var seq int64
	e.write(partition, func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.DeleteRow(ctx, r.Table, r.RowID); err != nil {
			return err
		}
		var err error
		seq, err = tx.AppendCommit(ctx, newCommit(DeleteChange(r)))
		return err
	})
	return seq
}

// row reads a committed row.
func (e *env) row(partition, table, rowID string) store.Row {
	e.t.Helper()
	r, err := e.s.Row(e.ctx, partition, table, rowID)
	if err != nil {
		e.t.Fatalf("Row(%q, %q, %q): %v", partition, table, rowID, err)
	}
	return r
}

// wantNoRow checks that the row is absent.
func (e *env) wantNoRow(partition, table, rowID string) {
	e.t.Helper()
	if r, err := e.s.Row(e.ctx, partition, table, rowID); !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("Row(%q, %q, %q) = %s, %v; want ErrNotFound", partition, table, rowID, fmtRow(r), err)
	}
}

// window reads the whole commit window (AfterSeq, ThroughSeq] of a table
// inside scopes, with no limit.
func (e *env) window(partition string, q store.CommitWindowQuery) []store.Commit {
	e.t.Helper()
	w, err := e.s.ReadCommitWindow(e.ctx, partition, q)
	if err != nil {
		e.t.Fatalf("ReadCommitWindow(%q, %+v): %v", partition, q, err)
	}
	if !w.Complete {
		e.t.Errorf("ReadCommitWindow(%q, %+v).Complete = false with no limit", partition, q)
	}
	return w.Commits
}

// seqs returns the sequences of commits.
func seqs(commits []store.Commit) []int64 {
	out := make([]int64, len(commits))
	for i, c := range commits {
		out[i] = c.Seq
	}
	return out
}

// seqRange returns from, from+1, ..., through.
func seqRange(from, through int64) []int64 {
	var out []int64
	for s := from; s <= through; s++ {
		out = append(out, s)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// scan reads every row of a table inside scopes, a page of 100 at a time.
func (e *env) scan(partition, table string, scopes wire.ScopeMap) []store.Row {
	e.t.Helper()
	const limit = 100
	var out []store.Row
	q := store.RowScanQuery{Table: table, Scopes: scopes, Limit: limit}
	for {
		page, err := e.s.ScanRows(e.ctx, partition, q)
		if err != nil {
			e.t.Fatalf("ScanRows(%q, %+v): %v", partition, q, err)
		}
		out = append(out, page...)
		if len(page) < limit {
			return out
		}
		q.After = &page[len(page)-1].RowID
	}
}
