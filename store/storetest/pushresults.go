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
