package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunPushResults tests the push-result journal and exactly-once apply.
func RunPushResults(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"ConcurrentDuplicateDelivery", testDuplicateDelivery},
		{"FirstWriterWins", testFirstWriterWins},
		{"NotFound", testPushResultNotFound},
		{"Prune", testPushResultPrune},
		{"PruneResumes", testPushResultPruneResumes},
		{"RoundTrip", testPushResultRoundTrip},
		{"Unreadable", testPushResultUnreadable},
	})
}

// miniPush is the idempotent apply of a push commit: inside the write
// boundary, replay the journal's record if there is one, else append the
// commit and record its outcome. applied reports which of the two ran.
func miniPush(ctx context.Context, s store.Store, partition, clientID, commitID string, w store.RowWrite) (rec store.PushRecord, applied bool, err error) {
	err = s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
		rec, applied = store.PushRecord{}, false
		got, err := tx.PushResult(ctx, clientID, commitID)
		switch {
		case err == nil:
			rec = got
			return nil
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		c := newCommit(UpsertChange(w))
		c.ClientID, c.ClientCommitID = clientID, commitID
		seq, err := tx.AppendCommit(ctx, c)
		if err != nil {
			return err
		}
		rec = store.PushRecord{
			Status:        wire.PushApplied,
			CommitSeq:     seq,
			RecordedAtMs:  5000,
			CacheIdentity: fmt.Sprintf("first-%d", seq),
			Results:       []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}},
		}
		stored, err := tx.PutPushResult(ctx, clientID, commitID, rec)
		if err != nil {
			return err
		}
		if !stored {
			return errors.New("PutPushResult lost to another writer inside the write boundary")
		}
		applied = true
		return nil
	})
	return rec, applied, err
}

func testDuplicateDelivery(t *testing.T, open Opener) {
	const deliveries = 8
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		recs    = make([]store.PushRecord, deliveries)
		applied = make([]bool, deliveries)
	)
	for i := range deliveries {
		wg.Go(func() {
			<-start
			var err error
			recs[i], applied[i], err = miniPush(e.ctx, e.s, "p1", "client-1", "cc-dup", w)
			if err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var first store.PushRecord
	n := 0
	for i, a := range applied {
		if a {
			n++
			first = recs[i]
		}
	}
	if n != 1 {
		t.Fatalf("%d of %d duplicate deliveries applied the commit, want exactly 1", n, deliveries)
	}
	for i, r := range recs {
		if !samePushRecord(r, first) {
			t.Errorf("delivery %d answered %s, want the first application's %s", i, fmtPushRecord(r), fmtPushRecord(first))
		}
	}
	if first.CommitSeq != 1 {
		t.Errorf("CommitSeq = %d, want 1", first.CommitSeq)
	}
	commits := e.window("p1", store.CommitWindowQuery{Table: TableTasks, Scopes: projectScope("p1"), ThroughSeq: 100})
	if len(commits) != 1 || commits[0].ClientCommitID != "cc-dup" {
		t.Errorf("log after duplicate deliveries = %s, want one commit", fmtCommits(commits))
	}
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-dup"); err != nil || !samePushRecord(got, first) {
		t.Errorf("PushResult = %s, %v; want %s", fmtPushRecord(got), err, fmtPushRecord(first))
	}
}

func testFirstWriterWins(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	a := store.PushRecord{Status: wire.PushApplied, CommitSeq: 3, CacheIdentity: "a", Results: []wire.OpResult{}}
	b := store.PushRecord{Status: wire.PushRejected, CacheIdentity: "b", Results: []wire.OpResult{{Status: wire.OpError, Code: "x"}}}
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		for i, tt := range []struct {
			rec  store.PushRecord
			want bool
		}{{a, true}, {b, false}} {
			stored, err := tx.PutPushResult(ctx, "client-1", "cc-1", tt.rec)
			if err != nil {
				return err
			}
			if stored != tt.want {
				t.Errorf("PutPushResult #%d in one transaction = %t, want %t", i+1, stored, tt.want)
			}
		}
		if got, err := tx.PushResult(ctx, "client-1", "cc-1"); err != nil || !samePushRecord(got, a) {
			t.Errorf("WriteTx.PushResult = %s, %v; want %s", fmtPushRecord(got), err, fmtPushRecord(a))
		}
		return nil
	})
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		stored, err := tx.PutPushResult(ctx, "client-1", "cc-1", b)
		if err == nil && stored {
			t.Errorf("PutPushResult over a committed record = true, want false")
		}
		return err
	})
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-1"); err != nil || !samePushRecord(got, a) {
		t.Errorf("PushResult = %s, %v; want the first record %s", fmtPushRecord(got), err, fmtPushRecord(a))
	}
}

func testPushResultNotFound(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: 1, Results: []wire.OpResult{}}
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if got, err := tx.PushResult(ctx, "client-1", "cc-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("WriteTx.PushResult(new id) = %s, %v; want ErrNotFound", fmtPushRecord(got), err)
		}
		_, err := tx.PutPushResult(ctx, "client-1", "cc-1", rec)
		return err
	})
	for _, k := range []struct{ partition, client, commit string }{
		{"p1", "client-1", "cc-2"},
		{"p1", "client-2", "cc-1"},
		{"p2", "client-1", "cc-1"},
		{"p3", "client-1", "cc-1"},
	} {
		if got, err := e.s.PushResult(e.ctx, k.partition, k.client, k.commit); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PushResult(%q, %q, %q) = %s, %v; want ErrNotFound", k.partition, k.client, k.commit, fmtPushRecord(got), err)
		}
	}
}

func testPushResultRoundTrip(t *testing.T, open Opener) {
	row := Task{ID: "t1", ProjectID: "p1", Title: ptr("server")}.RowWrite(t, 7).Payload
	tests := []struct {
		name string
		rec  store.PushRecord
	}{
		{"applied", store.PushRecord{
			Status: wire.PushApplied, CommitSeq: 42, RecordedAtMs: 1_700_000_000_000, CacheIdentity: "ci-1",
			Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}, {OpIndex: 1, Status: wire.OpApplied}},
		}},
		{"rejected with conflicts and errors", store.PushRecord{
			Status: wire.PushRejected, RecordedAtMs: 1_700_000_000_001, CacheIdentity: "ci-2",
			Results: []wire.OpResult{
				{OpIndex: 0, Status: wire.OpConflict, Code: "sync.version_conflict", Message: "stale", ServerVersion: 7, ServerRow: row, ConflictColumns: []byte{0x05}},
				{OpIndex: 1, Status: wire.OpConflict, Code: "sync.version_conflict", Message: "gone", ServerVersion: 0, ServerRow: []byte{}},
				{OpIndex: 2, Status: wire.OpError, Code: "sync.validation_failed", Message: "too long"},
				{OpIndex: 3, Status: wire.OpError, Code: "sync.internal", Message: "retry", Retryable: true},
				{OpIndex: 4, Status: wire.OpError, Code: "sync.forbidden", Message: "no"},
			},
			Details: []wire.DetailEntry{
				{OpIndex: 2, DetailsJSON: `{"fieldPaths":["title"],"reason":"too_long","references":{"row":"t1"}}`},
				{OpIndex: 4, DetailsJSON: `{"requiredAction":"reauthenticate"}`},
			},
		}},
		{"rejected without results", store.PushRecord{Status: wire.PushRejected, Results: []wire.OpResult{}}},
	}
	e := newEnv(t, open)
	e.touch("p1")
	for i, tt := range tests {
		id := fmt.Sprintf("cc-%d", i)
		e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
			_, err := tx.PutPushResult(ctx, "client-1", id, tt.rec)
			return err
		})
		if got, err := e.s.PushResult(e.ctx, "p1", "client-1", id); err != nil || !samePushRecord(got, tt.rec) {
			t.Errorf("%s: PushResult =\n  %s, %v\nwant\n  %s", tt.name, fmtPushRecord(got), err, fmtPushRecord(tt.rec))
		}
	}
}

// testPushResultUnreadable: a record that does not decode (here one with
// an invalid status, which store.EncodePushRecord encodes as "unknown") is
// ErrUnreadable. A driver that refuses to store such a record skips it.
func testPushResultUnreadable(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	bad := store.PushRecord{Status: wire.PushStatus(0), Results: []wire.OpResult{}}
	err := e.s.Write(e.ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.PutPushResult(ctx, "client-1", "cc-bad", bad)
		return err
	})
	if err != nil {
		t.Skipf("the driver refuses an undecodable record (%v); no other way to store one", err)
	}
	if got, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-bad"); !errors.Is(err, store.ErrUnreadable) {
		t.Errorf("PushResult(undecodable) = %s, %v; want ErrUnreadable", fmtPushRecord(got), err)
	}
	e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
		if got, err := tx.PushResult(ctx, "client-1", "cc-bad"); !errors.Is(err, store.ErrUnreadable) {
			t.Errorf("WriteTx.PushResult(undecodable) = %s, %v; want ErrUnreadable", fmtPushRecord(got), err)
		}
		return nil
	})
}

// testPushResultPrune: a journal prune, batch after batch in key order,
// deletes the records recorded before the cutoff, in every partition, and
// keeps the younger ones and those without a recorded time; the batches
// resume where the previous one stopped, and a second pass deletes nothing.
func testPushResultPrune(t *testing.T, open Opener) {
	e := newEnv(t, open)
	pr, ok := e.s.(store.PushResultPruner)
	if !ok {
		t.Skip("the store does not prune the push-result journal")
	}
	type key struct{ partition, client, commit string }
	recorded := map[key]int64{}
	put := func(k key, at int64) {
		recorded[k] = at
		e.write(k.partition, func(ctx context.Context, tx store.WriteTx) error {
			_, err := tx.PutPushResult(ctx, k.client, k.commit, store.PushRecord{
				Status: wire.PushApplied, CommitSeq: 1, RecordedAtMs: at, Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}})
			return err
		})
	}
	e.touch("p1")
	e.touch("p2")
	for i := range 10 {
		put(key{"p1", "client-1", fmt.Sprintf("cc-%02d", i)}, int64(1000*(i+1)))
	}
	put(key{"p1", "client-0", "cc-untimed"}, 0)
	put(key{"p2", "client-1", "cc-old"}, 1000)
	put(key{"p2", "client-1", "cc-young"}, 9000)
	const cutoff, limit = 5500, 3
	pass := func() (examined, deleted int64, batches int) {
		var after *store.PushResultKey
		for {
			res, err := pr.PrunePushResults(e.ctx, after, cutoff, limit)
			if err != nil {
				t.Fatalf("PrunePushResults: %v", err)
			}
			if res.Skipped {
				t.Fatalf("PrunePushResults skipped a batch with no other pruner")
			}
			if res.Examined > limit {
				t.Fatalf("a batch examined %d rows; limit %d", res.Examined, limit)
			}
			if after != nil && res.Examined > 0 {
				prev, last := *after, res.Last
				if [3]string{last.Partition, last.ClientID, last.ClientCommitID} == [3]string{prev.Partition, prev.ClientID, prev.ClientCommitID} {
					t.Fatalf("a batch did not move past %v", prev)
				}
			}
			examined, deleted, batches = examined+res.Examined, deleted+res.Deleted, batches+1
			if res.Done {
				return
			}
			if batches > 20 {
				t.Fatalf("the pass did not end after %d batches", batches)
			}
			last := res.Last
			after = &last
		}
	}
	examined, deleted, batches := pass()
	if examined != 13 || deleted != 6 || batches < 5 {
		t.Errorf("first pass: examined %d, deleted %d in %d batches; want 13, 6 in at least 5", examined, deleted, batches)
	}
	for k, at := range recorded {
		_, err := e.s.PushResult(e.ctx, k.partition, k.client, k.commit)
		gone := at != 0 && at < cutoff
		switch {
		case gone && !errors.Is(err, store.ErrNotFound):
			t.Errorf("PushResult%v (recorded at %d) = %v; want ErrNotFound (pruned)", k, at, err)
		case !gone && err != nil:
			t.Errorf("PushResult%v (recorded at %d) = %v; want it kept", k, at, err)
		}
	}
	if examined, deleted, _ := pass(); examined != 7 || deleted != 0 {
		t.Errorf("second pass: examined %d, deleted %d; want 7, 0", examined, deleted)
	}
}

// testPushResultPruneResumes: a resumed journal prune stores where each
// batch ended, in the database, so that the next batch, of the same
// store, of a reopened one (a restarted process) or of another store on
// the database (a fleet), goes on from there, whatever position its
// caller kept; at the journal's end the walk starts over with one lap
// more. The caller's fallback counts only while nothing is stored, an
// explicit batch leaves the stored position alone, and the stored row
// (in sync_backfill_checkpoints) holds back neither the serve gate nor
// the migration barrier.
func testPushResultPruneResumes(t *testing.T, open Opener) {
	e := newEnv(t, open)
	pr, ok := e.s.(store.PushResultPruner)
	if !ok {
		t.Skip("the store does not prune the push-result journal")
	}
	e.touch("p1")
	const cutoff, limit = 5500, 3
	var keys []store.PushResultKey
	for i := range 10 {
		k := store.PushResultKey{Partition: "p1", ClientID: "client-1", ClientCommitID: fmt.Sprintf("cc-%02d", i)}
		keys = append(keys, k)
		at := int64(9000) // young: kept, so that every lap reads every row
		if i == 8 {
			at = 1000
		}
		e.write("p1", func(ctx context.Context, tx store.WriteTx) error {
			_, err := tx.PutPushResult(ctx, k.ClientID, k.ClientCommitID, store.PushRecord{
				Status: wire.PushApplied, CommitSeq: 1, RecordedAtMs: at, Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}})
			return err
		})
	}
	fmtKey := func(k *store.PushResultKey) string {
		if k == nil {
			return "the start"
		}
		return k.ClientCommitID
	}
	position := func(s store.Store) store.PushResultsPosition {
		t.Helper()
		p, err := s.(store.PushResultPruner).PushResultsPosition(e.ctx)
		if err != nil {
			t.Fatalf("PushResultsPosition: %v", err)
		}
		return p
	}
	// batch runs one resumed batch on s and checks where it started and
	// ended (nil last: at the journal's end), and the position it stored.
	batch := func(s store.Store, fallback *store.PushResultKey, from, last *store.PushResultKey, examined, deleted, laps, lapRows int64) {
		t.Helper()
		res, err := s.(store.PushResultPruner).ResumePushResultsPrune(e.ctx, fallback, cutoff, limit)
		if err != nil {
			t.Fatalf("ResumePushResultsPrune: %v", err)
		}
		if res.Skipped || fmtKey(res.From) != fmtKey(from) || res.Examined != examined || res.Deleted != deleted || res.Done != (last == nil) ||
			(last != nil && res.Last != *last) {
			t.Fatalf("ResumePushResultsPrune(fallback %s) = from %s, examined %d, deleted %d, last %s, done %v, skipped %v; "+
				"want from %s, examined %d, deleted %d, last %s",
				fmtKey(fallback), fmtKey(res.From), res.Examined, res.Deleted, res.Last.ClientCommitID, res.Done, res.Skipped,
				fmtKey(from), examined, deleted, fmtKey(last))
		}
		p := position(e.s)
		if !p.Stored || fmtKey(p.After) != fmtKey(last) || p.Laps != laps || p.Examined != lapRows || p.UpdatedAtMs <= 0 {
			t.Fatalf("stored position after the batch = %+v (after %s); want after %s, %d laps, %d rows into the lap",
				p, fmtKey(p.After), fmtKey(last), laps, lapRows)
		}
	}
	if p := position(e.s); p.Stored {
		t.Fatalf("a new database has a stored position: %+v", p)
	}
	// Nothing stored: the caller's fallback is where the batch starts.
	batch(e.s, &keys[1], &keys[1], &keys[4], 3, 0, 0, 3)
	// Stored: the fallback no longer counts.
	batch(e.s, nil, &keys[4], &keys[7], 3, 0, 0, 6)
	// An explicit batch neither reads nor moves the stored position.
	if res, err := pr.PrunePushResults(e.ctx, nil, cutoff, limit); err != nil || res.From != nil || res.Last != keys[2] {
		t.Fatalf("PrunePushResults(from the start) = %+v, %v; want the first 3 rows", res, err)
	}
	if p := position(e.s); fmtKey(p.After) != fmtKey(&keys[7]) {
		t.Fatalf("an explicit batch moved the stored position to %s", fmtKey(p.After))
	}
	second := reopen(t, e.s)
	if second == nil {
		t.Skip(skipNoReopen)
	}
	// A reopened store (a restarted process, another of a fleet) goes on
	// where the first one stopped, whatever its own fallback.
	batch(second, &keys[0], &keys[7], nil, 2, 1, 1, 0)
	if _, err := e.s.PushResult(e.ctx, "p1", "client-1", "cc-08"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PushResult(cc-08, old) after the resumed batch = %v; want ErrNotFound (pruned)", err)
	}
	// The end reached: the next batch of either store starts over.
	batch(e.s, &keys[7], nil, &keys[2], 3, 0, 1, 3)
	batch(second, nil, &keys[2], &keys[5], 3, 0, 1, 6)
	batch(e.s, &keys[0], &keys[5], &keys[9], 3, 0, 1, 9)
	batch(second, nil, &keys[9], nil, 0, 0, 2, 0)

	// The row in sync_backfill_checkpoints is no checkpoint to the gate
	// or the barrier: the partition serves, the schema ensures again.
	b, ok := e.s.(store.Barrier)
	if !ok {
		return
	}
	g, err := b.ReadServeGate(e.ctx, "p1", FixtureSchema(t).Version())
	if err != nil || len(g.Pending) != 0 || g.WriterFence != 0 {
		t.Fatalf("ReadServeGate with a stored position = %+v, %v; want nothing pending, no fence", g, err)
	}
	if cps, err := b.ReadCheckpoints(e.ctx, "p1"); err != nil || len(cps) != 0 {
		t.Fatalf("ReadCheckpoints(p1) = %+v, %v; want none", cps, err)
	}
	if err := e.s.EnsureSchema(e.ctx, FixtureSchema(t)); err != nil {
		t.Fatalf("EnsureSchema again with a stored position: %v", err)
	}
	if err := b.EnsureSchemaWith(e.ctx, grownSchema(t), nil); err != nil {
		t.Fatalf("EnsureSchemaWith(version 2) with a stored position: %v", err)
	}
	if p := position(e.s); !p.Stored || p.Laps != 2 {
		t.Fatalf("stored position after the schema bump = %+v; want it kept", p)
	}
}
