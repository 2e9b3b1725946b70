package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// holdLeader starts a Write to partition whose function blocks until the
// returned release is called: while it blocks, the partition's leader is
// inside that batch and later Writes queue for the next one.
func holdLeader(t *testing.T, s *Store, partition string) (release func() error) {
	t.Helper()
	entered, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.Write(context.Background(), partition, func(ctx context.Context, tx store.WriteTx) error {
			close(entered)
			<-unblock
			return nil
		})
	}()
	<-entered
	return func() error {
		close(unblock)
		return <-done
	}
}

// waitQueued waits until n Writes queue for the partition's next batch.
func waitQueued(t *testing.T, s *Store, partition string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.groups.mu.Lock()
		q := 0
		if g := s.groups.m[partition]; g != nil {
			q = len(g.queue)
		}
		s.groups.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Writes queued for %q, want %d", q, partition, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// fixtureStore opens a store with the storetest fixture schema, whose
// tasks declare no unique index (their upserts are deferred).
func fixtureStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s := openIn(t, newSchema(t), cfg)
	if err := s.EnsureSchema(context.Background(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

func fixtureTask(t *testing.T, id, project, title string) store.RowWrite {
	t.Helper()
	return storetest.Task{ID: id, ProjectID: project, Title: &title}.RowWrite(t, 1)
}

// enginePush is what the engine does for a push of one commit (see
// BenchmarkPushCommit), through WriteReadAhead; it returns the sequence,
// or 0 with replay set when the journal already held the commit.
func enginePush(ctx context.Context, s *Store, partition, commitID string, rows ...store.RowWrite) (seq int64, replay bool, err error) {
	return enginePushReads(ctx, s, partition, commitID, true, rows...)
}

// enginePushReads is enginePush; without readRows the commit writes its
// rows without reading them first (as no engine push does: a test of what
// the store must still get right, such as one row written twice).
func enginePushReads(ctx context.Context, s *Store, partition, commitID string, readRows bool, rows ...store.RowWrite) (seq int64, replay bool, err error) {
	reads := store.WriteReads{ClientID: "client", ClientCommitID: commitID}
	for _, r := range rows {
		reads.Rows = append(reads.Rows, store.RowKey{Table: r.Table, RowID: r.RowID})
	}
	err = s.WriteReadAhead(ctx, partition, reads, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.(store.BarrierTx).ServeGate(ctx, 1); err != nil {
			return err
		}
		rec, err := tx.PushResult(ctx, "client", commitID)
		if err == nil {
			seq, replay = rec.CommitSeq, true
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return tx.Candidate(ctx, func(ctx context.Context) error {
			var changes []store.Change
			for _, r := range rows {
				if !readRows {
					if err := tx.UpsertRow(ctx, r); err != nil {
						return err
					}
					changes = append(changes, storetest.UpsertChange(r))
					continue
				}
				if _, err := tx.Row(ctx, r.Table, r.RowID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if _, _, err := tx.Tombstone(ctx, r.Table, r.RowID); err != nil {
					return err
				}
				if err := tx.UpsertRow(ctx, r); err != nil {
					return err
				}
				changes = append(changes, storetest.UpsertChange(r))
			}
			var err error
			if seq, err = tx.AppendCommit(ctx, store.NewCommit{ClientID: "client", ClientCommitID: commitID, ActorID: "a", CreatedAtMs: 1, Changes: changes}); err != nil {
				return err
			}
			stored, err := tx.PutPushResult(ctx, "client", commitID, store.PushRecord{Status: wire.PushApplied, CommitSeq: seq, Results: []wire.OpResult{}})
			if err == nil && !stored {
				err = errors.New("push result not stored")
			}
			return err
		})
	})
	return seq, replay, err
}

// logSeqs returns the partition's commit sequences.
func logSeqs(t *testing.T, s *Store, partition string) []int64 {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT commit_seq FROM sync_commits WHERE partition = $1 ORDER BY commit_seq`, partition)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		out = append(out, seq)
	}
	return out
}

// TestGroupCommitOneTransaction: pushes that queue while a batch runs
// share the next one: one transaction, two round trips (the reads ahead
// with the lock, then the writes with COMMIT) for all of them, each with
// its own dense sequence and journal record.
func TestGroupCommitOneTransaction(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	release := holdLeader(t, s, "p")
	const n = 10
	type result struct {
		seq int64
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			seq, _, err := enginePush(ctx, s, "p", fmt.Sprintf("c%d", i), fixtureTask(t, fmt.Sprintf("r%d", i), "p", "x"))
			results <- result{seq, err}
		}()
	}
	waitQueued(t, s, "p", n)
	before, trips := s.Stats(), s.roundTrips.Load()
	if err := release(); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		seqs = append(seqs, r.seq)
	}
	slices.Sort(seqs)
	if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(seqs, want) || !slices.Equal(logSeqs(t, s, "p"), want) {
		t.Errorf("sequences %v, log %v; want 1..10", seqs, logSeqs(t, s, "p"))
	}
	st := s.Stats()
	// The held Write (which sent nothing, so committed no transaction) and
	// the ten.
	if st.Batches-before.Batches != 1 || st.Writes-before.Writes != n+1 || st.Commits-before.Commits != n {
		t.Errorf("stats %+v after %+v: want one batch of %d commits", st, before, n)
	}
	if got := s.roundTrips.Load() - trips; got != 2 {
		t.Errorf("%d round trips for a batch of %d pushes, want 2", got, n)
	}
	if p, err := s.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != n {
		t.Errorf("Partition = %+v, %v", p, err)
	}
	for i := range n {
		if rec, err := s.PushResult(ctx, "p", "client", fmt.Sprintf("c%d", i)); err != nil || rec.CommitSeq < 1 {
			t.Errorf("push result c%d = %+v, %v", i, rec, err)
		}
	}
}

// TestGroupCommitFailuresIsolated: in one batch, a function that fails
// after writing, one that panics, one whose candidate is rejected and one
// whose context is cancelled while it waits each get their own answer and
// leave no trace; the others commit with dense sequences.
func TestGroupCommitFailuresIsolated(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	release := holdLeader(t, s, "p")
	errReject := errors.New("rejected")
	type outcome struct {
		name string
		seq  int64
		err  error
	}
	out := make(chan outcome, 8)
	write := func(name string, ctx context.Context, fn func(ctx context.Context, tx store.WriteTx) (int64, error)) {
		go func() {
			var seq int64
			err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
				var err error
				seq, err = fn(ctx, tx)
				return err
			})
			out <- outcome{name, seq, err}
		}()
	}
	appendRow := func(ctx context.Context, tx store.WriteTx, id string) (int64, error) {
		w := fixtureTask(t, id, "p", id)
		if err := tx.UpsertRow(ctx, w); err != nil {
			return 0, err
		}
		return tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: id, ActorID: "a", CreatedAtMs: 1, Changes: []store.Change{storetest.UpsertChange(w)}})
	}
	queued := 0
	enqueue := func(name string, ctx context.Context, fn func(ctx context.Context, tx store.WriteTx) (int64, error)) {
		write(name, ctx, fn)
		queued++
		waitQueued(t, s, "p", queued) // in this order
	}
	enqueue("ok1", ctx, func(ctx context.Context, tx store.WriteTx) (int64, error) { return appendRow(ctx, tx, "ok1") })
	enqueue("fails", ctx, func(ctx context.Context, tx store.WriteTx) (int64, error) {
		// A read makes its writes reach the database before it fails.
		if _, err := appendRow(ctx, tx, "fails"); err != nil {
			return 0, err
		}
		if _, err := tx.Row(ctx, storetest.TableTasks, "fails"); err != nil {
			return 0, err
		}
		return 0, errBoom
	})
	enqueue("panics", ctx, func(ctx context.Context, tx store.WriteTx) (int64, error) {
		if _, err := appendRow(ctx, tx, "panics"); err != nil {
			return 0, err
		}
		panic("boom")
	})
	enqueue("rejected", ctx, func(ctx context.Context, tx store.WriteTx) (int64, error) {
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if _, err := appendRow(ctx, tx, "rejected"); err != nil {
				return err
			}
			if _, err := tx.Row(ctx, storetest.TableTasks, "rejected"); err != nil {
				return err
			}
			return errReject
		})
		if !errors.Is(err, errReject) {
			return 0, fmt.Errorf("candidate: %v", err)
		}
		_, err = tx.PutPushResult(ctx, "c", "rejected", store.PushRecord{Status: wire.PushRejected, Results: []wire.OpResult{}})
		return 0, err
	})
	cctx, cancel := context.WithCancel(ctx)
	enqueue("cancelled", cctx, func(ctx context.Context, tx store.WriteTx) (int64, error) { return appendRow(ctx, tx, "cancelled") })
	cancel()
	enqueue("ok2", ctx, func(ctx context.Context, tx store.WriteTx) (int64, error) { return appendRow(ctx, tx, "ok2") })
	if err := release(); err != nil {
		t.Fatal(err)
	}
	got := map[string]outcome{}
	for range queued {
		o := <-out
		got[o.name] = o
	}
	if o := got["ok1"]; o.err != nil || o.seq != 1 {
		t.Errorf("ok1 = %d, %v; want 1", o.seq, o.err)
	}
	if o := got["ok2"]; o.err != nil || o.seq != 2 {
		t.Errorf("ok2 = %d, %v; want 2", o.seq, o.err)
	}
	if o := got["fails"]; !errors.Is(o.err, errBoom) {
		t.Errorf("fails = %v", o.err)
	}
	if o := got["panics"]; o.err == nil || !strings.Contains(o.err.Error(), "panicked") {
		t.Errorf("panics = %v", o.err)
	}
	if o := got["rejected"]; o.err != nil {
		t.Errorf("rejected = %v", o.err)
	}
	if o := got["cancelled"]; !errors.Is(o.err, context.Canceled) {
		t.Errorf("cancelled = %v", o.err)
	}
	if seqs := logSeqs(t, s, "p"); !slices.Equal(seqs, []int64{1, 2}) {
		t.Errorf("log %v, want [1 2]", seqs)
	}
	for _, id := range []string{"fails", "panics", "rejected", "cancelled"} {
		if _, err := s.Row(ctx, "p", storetest.TableTasks, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("row %s: %v, want none", id, err)
		}
	}
	if rec, err := s.PushResult(ctx, "p", "c", "rejected"); err != nil || rec.Status != wire.PushRejected {
		t.Errorf("journal of the rejected commit = %+v, %v", rec, err)
	}
	if p, err := s.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 2 {
		t.Errorf("Partition = %+v, %v", p, err)
	}
}

// TestGroupCommitLateFailure: a deferred write that fails once its
// function returned (a unique index the schema does not declare, so the
// upsert is not checked at once) fails that commit alone, and every later
// commit of the batch that appended (their sequences came after its):
// none of them is acknowledged, the log stays dense, and a commit of the
// batch that did not append is kept. A later commit that finds the
// failure in its own round trip fails with it.
func TestGroupCommitLateFailure(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE UNIQUE INDEX undeclared_title ON tasks(_sync_partition, title)`); err != nil {
		t.Fatal(err)
	}
	release := holdLeader(t, s, "p")
	type outcome struct {
		seq int64
		err error
	}
	outs := make([]chan outcome, 5)
	for i, title := range []string{"a", "a", "c", "e", ""} {
		outs[i] = make(chan outcome, 1)
		go func() {
			if title == "e" {
				// Appends, then reads what was not read ahead: the round
				// trip carries the failing write, after which its own
				// append's sequence is no longer the one it was given.
				var seq int64
				err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
					w := fixtureTask(t, "r3", "p", "e")
					if err := tx.UpsertRow(ctx, w); err != nil {
						return err
					}
					var err error
					if seq, err = tx.AppendCommit(ctx, store.NewCommit{ClientID: "client", ClientCommitID: "c3", ActorID: "a", CreatedAtMs: 1,
						Changes: []store.Change{storetest.UpsertChange(w)}}); err != nil {
						return err
					}
					if _, err = tx.Row(ctx, storetest.TableTasks, "elsewhere"); errors.Is(err, store.ErrNotFound) {
						err = nil
					}
					return err
				})
				outs[i] <- outcome{seq, err}
				return
			}
			if title == "" {
				// Appends nothing: only a journal record.
				err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
					_, err := tx.PutPushResult(ctx, "client", "journal-only", store.PushRecord{Status: wire.PushRejected, Results: []wire.OpResult{}})
					return err
				})
				outs[i] <- outcome{0, err}
				return
			}
			seq, _, err := enginePush(ctx, s, "p", fmt.Sprintf("c%d", i), fixtureTask(t, fmt.Sprintf("r%d", i), "p", title))
			outs[i] <- outcome{seq, err}
		}()
		waitQueued(t, s, "p", i+1)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	first, dup, later, reader, journal := <-outs[0], <-outs[1], <-outs[2], <-outs[3], <-outs[4]
	if reader.err == nil || !strings.Contains(reader.err.Error(), "undeclared_title") {
		t.Errorf("the append that read after the failed one = %+v; want it failed", reader)
	}
	if first.err != nil || first.seq != 1 {
		t.Errorf("first = %+v; want seq 1", first)
	}
	if dup.err == nil || !strings.Contains(dup.err.Error(), "undeclared_title") {
		t.Errorf("duplicate = %+v; want the unique violation", dup)
	}
	if later.err == nil {
		t.Errorf("the append after the failed one = %+v; want it failed", later)
	}
	if journal.err != nil {
		t.Errorf("journal-only = %v", journal.err)
	}
	if seqs := logSeqs(t, s, "p"); !slices.Equal(seqs, []int64{1}) {
		t.Errorf("log %v, want [1]", seqs)
	}
	if p, err := s.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 1 {
		t.Errorf("Partition = %+v, %v", p, err)
	}
	for i, want := range []bool{true, false, false, false} {
		_, err := s.PushResult(ctx, "p", "client", fmt.Sprintf("c%d", i))
		if got := err == nil; got != want {
			t.Errorf("journal of c%d: %v, want present %v", i, err, want)
		}
	}
	if _, err := s.PushResult(ctx, "p", "client", "journal-only"); err != nil {
		t.Errorf("journal-only record: %v", err)
	}
	// The partition goes on.
	if seq, _, err := enginePush(ctx, s, "p", "c2", fixtureTask(t, "r2", "p", "c")); err != nil || seq != 2 {
		t.Errorf("retry of the later commit = %d, %v; want 2", seq, err)
	}
}

// TestGroupCommitReadAheadSeesBatch: what a batch read ahead is not
// trusted past a write of an earlier commit of the batch: a row inserted
// by one push is found by the next (its upsert sees it), and a commit id
// pushed twice in one batch is applied once and replayed once.
func TestGroupCommitReadAheadSeesBatch(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	release := holdLeader(t, s, "p")
	type outcome struct {
		seq    int64
		replay bool
		err    error
		found  bool
	}
	outs := make([]chan outcome, 3)
	for i := range outs {
		outs[i] = make(chan outcome, 1)
	}
	go func() {
		seq, replay, err := enginePush(ctx, s, "p", "same", fixtureTask(t, "r", "p", "one"))
		outs[0] <- outcome{seq: seq, replay: replay, err: err}
	}()
	waitQueued(t, s, "p", 1)
	go func() {
		seq, replay, err := enginePush(ctx, s, "p", "same", fixtureTask(t, "r", "p", "one"))
		outs[1] <- outcome{seq: seq, replay: replay, err: err}
	}()
	waitQueued(t, s, "p", 2)
	go func() {
		var found bool
		err := s.WriteReadAhead(ctx, "p", store.WriteReads{Rows: []store.RowKey{{Table: storetest.TableTasks, RowID: "r"}}},
			func(ctx context.Context, tx store.WriteTx) error {
				row, err := tx.Row(ctx, storetest.TableTasks, "r")
				found = err == nil && row.RowID == "r"
				if errors.Is(err, store.ErrNotFound) {
					err = nil
				}
				return err
			})
		outs[2] <- outcome{err: err, found: found}
	}()
	waitQueued(t, s, "p", 3)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	a, b, c := <-outs[0], <-outs[1], <-outs[2]
	if a.err != nil || a.replay || a.seq != 1 {
		t.Errorf("first push = %+v; want applied at 1", a)
	}
	if b.err != nil || !b.replay || b.seq != 1 {
		t.Errorf("second push of the same commit = %+v; want a replay of 1", b)
	}
	if c.err != nil || !c.found {
		t.Errorf("row read after the batch's insert = %+v; want found", c)
	}
	if seqs := logSeqs(t, s, "p"); !slices.Equal(seqs, []int64{1}) {
		t.Errorf("log %v, want [1]", seqs)
	}
}

// TestGroupCommitPartitionsIndependent: a partition whose batch is stuck
// does not hold up another partition's writes (batches are per partition,
// on their own connections).
func TestGroupCommitPartitionsIndependent(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := holdLeader(t, s, "stuck")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			p := fmt.Sprintf("free-%d", i)
			for k := range 5 {
				if seq, _, err := enginePush(ctx, s, p, fmt.Sprintf("c%d", k), fixtureTask(t, fmt.Sprintf("r%d", k), p, "x")); err != nil || seq != int64(k+1) {
					t.Errorf("%s: push %d = %d, %v", p, k, seq, err)
				}
			}
		})
	}
	wg.Wait()
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// TestRowScopesIndexAtOpen: a database without sync_row_scopes_by_row (one
// the reference created) gets it at a read-write Open, and a read-only
// store serves without it.
func TestRowScopesIndexAtOpen(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	c := testSchema(t, 1)
	ensure(t, s, c)
	exists := func() int64 {
		return queryInt(t, s, `SELECT count(*) FROM pg_class WHERE relname = 'sync_row_scopes_by_row' AND relnamespace = $1::regnamespace`, name)
	}
	if exists() != 1 {
		t.Fatal("Open did not create sync_row_scopes_by_row")
	}
	admin(t, testURL(t), "DROP INDEX "+name+".sync_row_scopes_by_row")
	ro := openIn(t, name, Config{ReadOnly: true})
	if err := ro.EnsureSchema(context.Background(), c); err != nil {
		t.Errorf("read-only EnsureSchema without the index: %v", err)
	}
	if exists() != 0 {
		t.Fatal("the read-only store created the index")
	}
	openIn(t, name, Config{})
	if exists() != 1 {
		t.Error("a read-write Open did not create the missing index")
	}
}

// TestGroupCommitLateFailureAtCommit: a deferred write that fails in the
// COMMIT's own round trip fails its commit, which is rolled back to its
// savepoint, and the rest is sent again: the commit before it and a later
// one that appended nothing are kept; the later one that appended fails.
func TestGroupCommitLateFailureAtCommit(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE UNIQUE INDEX undeclared_title ON tasks(_sync_partition, title)`); err != nil {
		t.Fatal(err)
	}
	release := holdLeader(t, s, "p")
	type outcome struct {
		seq int64
		err error
	}
	outs := make([]chan outcome, 4)
	for i, title := range []string{"a", "a", "", "d"} {
		outs[i] = make(chan outcome, 1)
		go func() {
			if title == "" {
				// Reads its journal record ahead, so its push result is
				// deferred too; appends nothing.
				err := s.WriteReadAhead(ctx, "p", store.WriteReads{ClientID: "client", ClientCommitID: "journal-only"},
					func(ctx context.Context, tx store.WriteTx) error {
						if _, err := tx.PushResult(ctx, "client", "journal-only"); !errors.Is(err, store.ErrNotFound) {
							return fmt.Errorf("push result: %v", err)
						}
						_, err := tx.PutPushResult(ctx, "client", "journal-only", store.PushRecord{Status: wire.PushRejected, Results: []wire.OpResult{}})
						return err
					})
				outs[i] <- outcome{0, err}
				return
			}
			seq, _, err := enginePush(ctx, s, "p", fmt.Sprintf("c%d", i), fixtureTask(t, fmt.Sprintf("r%d", i), "p", title))
			outs[i] <- outcome{seq, err}
		}()
		waitQueued(t, s, "p", i+1)
	}
	before := s.roundTrips.Load()
	if err := release(); err != nil {
		t.Fatal(err)
	}
	first, dup, journal, later := <-outs[0], <-outs[1], <-outs[2], <-outs[3]
	if first.err != nil || first.seq != 1 {
		t.Errorf("first = %d, %v; want 1", first.seq, first.err)
	}
	if dup.err == nil || !strings.Contains(dup.err.Error(), "undeclared_title") {
		t.Errorf("duplicate = %v; want the unique violation", dup.err)
	}
	if journal.err != nil {
		t.Errorf("journal-only = %v", journal.err)
	}
	if later.err == nil {
		t.Errorf("the append after the failed one = %d; want it failed", later.seq)
	}
	if seqs := logSeqs(t, s, "p"); !slices.Equal(seqs, []int64{1}) {
		t.Errorf("log %v, want [1]", seqs)
	}
	if p, err := s.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 1 {
		t.Errorf("Partition = %+v, %v", p, err)
	}
	if _, err := s.Row(ctx, "p", storetest.TableTasks, "r0"); err != nil {
		t.Errorf("the first commit's row: %v", err)
	}
	for _, id := range []string{"r1", "r3"} {
		if _, err := s.Row(ctx, "p", storetest.TableTasks, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("row %s of a failed commit: %v", id, err)
		}
	}
	if _, err := s.PushResult(ctx, "p", "client", "journal-only"); err != nil {
		t.Errorf("journal-only record: %v", err)
	}
	// The reads ahead, the failed COMMIT round trip, the rollback to the
	// failed commit's savepoint and the one sent again.
	if n := s.roundTrips.Load() - before; n != 4 {
		t.Errorf("%d round trips, want 4", n)
	}
}

// logDump returns a partition's log tables as text, the partition column
// left out: the commits, their changes, the change scope entries and the
// journal records.
func logDump(t *testing.T, s *Store, partition string) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT format('%s %s %s %s %s %s', commit_seq, client_id, client_commit_id, actor_id, created_at_ms, writer_version) FROM sync_commits WHERE partition = $1 ORDER BY commit_seq`,
		`SELECT format('%s %s %s %s %s %s %s %s', commit_seq, idx, tbl, row_id, op, row_version, scopes, encode(payload, 'hex')) FROM sync_changes WHERE partition = $1 ORDER BY commit_seq, idx`,
		`SELECT format('%s %s %s %s', tbl, var, value, commit_seq) FROM sync_change_scopes WHERE partition = $1 ORDER BY 1`,
		`SELECT format('%s %s %s', client_id, client_commit_id, result) FROM sync_push_results WHERE partition = $1 ORDER BY 1`,
		`SELECT (to_jsonb(t) - '_sync_partition')::text FROM tasks t WHERE _sync_partition = $1 ORDER BY _sync_row_id`,
		`SELECT (to_jsonb(t) - '_sync_partition')::text FROM notes t WHERE _sync_partition = $1 ORDER BY _sync_row_id`,
		`SELECT format('%s %s %s %s', tbl, var, value, row_id) FROM sync_row_scopes WHERE partition = $1 ORDER BY 1`,
	} {
		rows, err := s.pool.Query(context.Background(), q, partition)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "--"), lines...)
	}
	return out
}

// TestGroupCommitCoalescedRows: the row upserts of a coalesced tail go as
// one statement per table (coalesce.go) and leave the rows, their scope
// index entries and the log as the same pushes one batch each: typed
// values of every kind and NULL, a row written twice in the batch (its
// scopes changed in between), two tables, rows that exist before. A table
// whose stored column types differ from the schema's keeps its statement
// per upsert.
func TestGroupCommitCoalescedRows(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	str := func(v string) *string { return &v }
	num := func(v int64) *int64 { return &v }
	// The engine reads a row before it writes it, and a read of a row
	// written earlier in the batch sends what is deferred: a tail holds a
	// row once, but for a commit that writes a row twice (blind, the
	// fourth).
	commits := [][]store.RowWrite{
		{storetest.Task{ID: "a", ProjectID: "p1", Title: str("first"), N: num(7), Blob: []byte{1, 2}}.RowWrite(t, 1)},
		{storetest.Task{ID: "b", ProjectID: "p1", Blob: []byte{}}.RowWrite(t, 1),
			storetest.Note{ID: "n1", ProjectID: "p1", TeamID: "t1", Body: str("x")}.RowWrite(t, 1)},
		{storetest.Note{ID: "n2", ProjectID: "p2", TeamID: "t1"}.RowWrite(t, 1),
			storetest.Task{ID: "pre", ProjectID: "p3", Title: str("rewritten"), N: num(-1)}.RowWrite(t, 2)},
		{storetest.Task{ID: "d", ProjectID: "p1", Title: str("one")}.RowWrite(t, 1),
			storetest.Task{ID: "d", ProjectID: "p2", Title: str("two")}.RowWrite(t, 2)},
		{storetest.Note{ID: "n3", ProjectID: "p1", TeamID: "t2", Body: str("y")}.RowWrite(t, 1)},
	}
	const blind = 3
	pushAll := func(partition string, together bool) {
		t.Helper()
		if _, _, err := enginePush(ctx, s, partition, "pre", storetest.Task{ID: "pre", ProjectID: "p0"}.RowWrite(t, 1)); err != nil {
			t.Fatal(err)
		}
		if !together {
			for i, rows := range commits {
				if _, _, err := enginePushReads(ctx, s, partition, fmt.Sprintf("c%d", i), i != blind, rows...); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		release := holdLeader(t, s, partition)
		errs := make(chan error, len(commits))
		for i, rows := range commits {
			go func() {
				_, _, err := enginePushReads(ctx, s, partition, fmt.Sprintf("c%d", i), i != blind, rows...)
				errs <- err
			}()
			waitQueued(t, s, partition, i+1)
		}
		if err := release(); err != nil {
			t.Fatal(err)
		}
		for range commits {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	pushAll("one-by-one", false)
	before := s.coalescedRows.Load()
	pushAll("together", true)
	if got := s.coalescedRows.Load() - before; got != 2 {
		t.Errorf("%d coalesced upsert statements, want 2 (tasks and notes)", got)
	}
	want := logDump(t, s, "one-by-one")
	if got := logDump(t, s, "together"); !slices.Equal(got, want) {
		t.Errorf("the coalesced batch wrote\n%s\nthe same pushes one by one\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Stored as numeric, not the schema's bigint: tasks upserts are not
	// joined, notes upserts still are.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE tasks ALTER COLUMN n TYPE numeric`); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	before = s.coalescedRows.Load()
	pushAll("altered", true)
	if got := s.coalescedRows.Load() - before; got != 1 {
		t.Errorf("%d coalesced upsert statements after the type change, want 1 (notes)", got)
	}
	if got := logDump(t, s, "altered"); !slices.Equal(got, want) {
		t.Errorf("after the type change the batch wrote\n%s\nthe same pushes one by one\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGroupCommitCoalescedAppends: the appends of a batch's pushes go as
// one statement (coalesce.go) and write exactly what the same pushes
// write one batch each; when a statement of that tail fails, it is undone
// and the commits are sent one by one: the failing one and the later
// appends fail, the earlier ones are kept.
func TestGroupCommitCoalescedAppends(t *testing.T) {
	t.Parallel()
	s := fixtureStore(t, Config{})
	ctx := context.Background()
	const n = 6
	push := func(partition string, i int, title string) (int64, error) {
		seq, _, err := enginePush(ctx, s, partition, fmt.Sprintf("c%d", i), fixtureTask(t, fmt.Sprintf("r%d", i), "proj"+strconv.Itoa(i%2), title))
		return seq, err
	}
	for i := range n {
		if _, err := push("one-by-one", i, "t"); err != nil {
			t.Fatal(err)
		}
	}
	before := s.coalesced.Load()
	release := holdLeader(t, s, "together")
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := push("together", i, "t")
			errs <- err
		}()
		waitQueued(t, s, "together", i+1)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.coalesced.Load() - before; got != 1 {
		t.Errorf("%d coalesced batches, want 1", got)
	}
	if a, b := logDump(t, s, "one-by-one"), logDump(t, s, "together"); !slices.Equal(a, b) {
		t.Errorf("the coalesced batch wrote\n%s\nthe same pushes one by one\n%s", strings.Join(b, "\n"), strings.Join(a, "\n"))
	}

	if _, err := s.pool.Exec(ctx, `CREATE UNIQUE INDEX undeclared_title ON tasks(_sync_partition, title) WHERE _sync_partition = 'p'`); err != nil {
		t.Fatal(err)
	}
	fallbacks := s.tailFallbacks.Load()
	release = holdLeader(t, s, "p")
	type outcome struct {
		seq int64
		err error
	}
	outs := make([]chan outcome, 4)
	for i, title := range []string{"a", "b", "a", "d"} {
		outs[i] = make(chan outcome, 1)
		go func() {
			seq, err := push("p", i, title)
			outs[i] <- outcome{seq, err}
		}()
		waitQueued(t, s, "p", i+1)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	first, second, dup, later := <-outs[0], <-outs[1], <-outs[2], <-outs[3]
	if first.err != nil || first.seq != 1 || second.err != nil || second.seq != 2 {
		t.Errorf("first two = %+v %+v; want sequences 1 and 2", first, second)
	}
	if dup.err == nil || !strings.Contains(dup.err.Error(), "undeclared_title") {
		t.Errorf("duplicate = %+v; want the unique violation", dup)
	}
	if later.err == nil {
		t.Errorf("the append after the failed one = %+v; want it failed", later)
	}
	if got := s.tailFallbacks.Load() - fallbacks; got != 1 {
		t.Errorf("%d tails sent again, want 1", got)
	}
	if seqs := logSeqs(t, s, "p"); !slices.Equal(seqs, []int64{1, 2}) {
		t.Errorf("log %v, want [1 2]", seqs)
	}
	for i, want := range []bool{true, true, false, false} {
		_, err := s.PushResult(ctx, "p", "client", fmt.Sprintf("c%d", i))
		if got := err == nil; got != want {
			t.Errorf("journal of c%d: %v, want present %v", i, err, want)
		}
	}
	if p, err := s.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 2 {
		t.Errorf("Partition = %+v, %v", p, err)
	}
}
