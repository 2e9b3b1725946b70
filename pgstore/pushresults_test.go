package pgstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// TestPrunePushResultsForms: the journal prune reads the recorded time
// from both stored forms of a record (a JSONB object, and the reference's
// JSONB string of the JSON text) and keeps the records it cannot read
// (a string that is not JSON, a recordedAtMs that is not a number)
// instead of failing the batch.
func TestPrunePushResultsForms(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	ctx := context.Background()
	rows := []struct {
		id, sql string
		gone    bool
	}{
		{"obj-old", `'{"status":"applied","commitSeq":1,"recordedAtMs":1000,"results":[]}'::jsonb`, true},
		{"obj-young", `'{"status":"applied","commitSeq":1,"recordedAtMs":9000,"results":[]}'::jsonb`, false},
		{"str-old", `to_jsonb('{"status":"applied","commitSeq":1,"recordedAtMs":1000,"results":[]}'::text)`, true},
		{"str-young", `to_jsonb('{"status":"applied","commitSeq":1,"recordedAtMs":9000,"results":[]}'::text)`, false},
		{"str-bad", `to_jsonb('not json'::text)`, false},
		{"obj-text-time", `'{"status":"applied","commitSeq":1,"recordedAtMs":"1000","results":[]}'::jsonb`, false},
		{"obj-untimed", `'{"status":"applied","commitSeq":1,"results":[]}'::jsonb`, false},
	}
	for _, r := range rows {
		if _, err := s.pool.Exec(ctx, `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result) VALUES ('p', 'c', $1, `+r.sql+`)`, r.id); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.PrunePushResults(ctx, nil, 5000, 100)
	if err != nil || res.Examined != int64(len(rows)) || res.Deleted != 2 || !res.Done {
		t.Fatalf("PrunePushResults = %+v, %v; want %d examined, 2 deleted, done", res, err, len(rows))
	}
	for _, r := range rows {
		n := queryInt(t, s, `SELECT count(*) FROM sync_push_results WHERE client_commit_id = '`+r.id+`'`)
		if (n == 0) != r.gone {
			t.Errorf("%s: %d rows left; pruned want %v", r.id, n, r.gone)
		}
	}
	if _, err := s.PushResult(ctx, "p", "c", "str-young"); err != nil {
		t.Errorf("PushResult(str-young) after the prune: %v", err)
	}
	if _, err := s.PushResult(ctx, "p", "c", "str-old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PushResult(str-old) after the prune: %v; want ErrNotFound", err)
	}
}

// TestPrunePushResultsOnePruner: while one transaction holds the journal
// prune's advisory lock (another process pruning), a batch is skipped:
// it examines and deletes nothing, and does not wait.
func TestPrunePushResultsOnePruner(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
VALUES ('p', 'c', 'old', '{"status":"applied","commitSeq":1,"recordedAtMs":1000,"results":[]}'::jsonb)`); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var locked bool
	if err := tx.QueryRow(ctx, sqlTryLockPushResultsPrune).Scan(&locked); err != nil || !locked {
		t.Fatalf("taking the prune lock: %v %v", locked, err)
	}
	res, err := s.PrunePushResults(ctx, nil, 5000, 100)
	if err != nil || !res.Skipped || res.Examined != 0 || res.Deleted != 0 {
		t.Fatalf("PrunePushResults beside another pruner = %+v, %v; want skipped", res, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = s.PrunePushResults(ctx, nil, 5000, 100)
	if err != nil || res.Skipped || res.Deleted != 1 {
		t.Fatalf("PrunePushResults once the other is done = %+v, %v; want 1 deleted", res, err)
	}
}

// TestPushResultsPositionLongKey: a position whose stored name would be
// longer than maxStoredPositionBytes (a journal key near Postgres's
// B-tree entry limit) is not stored: the batch clears the stored position
// instead of failing on the index, and the next batch goes on from its
// caller's fallback; one exactly at the bound, of text that does not
// compress, is stored.
func TestPushResultsPositionLongKey(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	text := func(n int) string {
		const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		b := make([]byte, n)
		for i := range b {
			b[i] = alnum[rnd.IntN(len(alnum))]
		}
		return string(b)
	}
	long := store.PushResultKey{Partition: "p", ClientID: "b" + text(1299), ClientCommitID: text(1300)}
	// at is a key whose stored name is exactly maxStoredPositionBytes.
	at := store.PushResultKey{Partition: "p", ClientID: "c" + text(1000)}
	at.ClientCommitID = text(maxStoredPositionBytes - len(store.EncodePushResultsPosition(&at)) - 3) // "0:" becomes "NNNN:"
	if n := len(store.EncodePushResultsPosition(&at)); n != maxStoredPositionBytes {
		t.Fatalf("the key at the bound is stored in %d bytes", n)
	}
	keys := []store.PushResultKey{{Partition: "p", ClientID: "a", ClientCommitID: "1"}, long, at, {Partition: "p", ClientID: "d", ClientCommitID: "1"}}
	for _, k := range keys {
		if _, err := s.pool.Exec(ctx, `INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
VALUES ($1, $2, $3, '{"status":"applied","commitSeq":1,"recordedAtMs":9000,"results":[]}'::jsonb)`, k.Partition, k.ClientID, k.ClientCommitID); err != nil {
			t.Fatal(err)
		}
	}
	step := func(fallback *store.PushResultKey, wantFrom *store.PushResultKey, wantStored bool) store.PushResultPrune {
		t.Helper()
		res, err := s.ResumePushResultsPrune(ctx, fallback, 5000, 1)
		if err != nil {
			t.Fatalf("ResumePushResultsPrune: %v", err)
		}
		if (res.From == nil) != (wantFrom == nil) || (res.From != nil && *res.From != *wantFrom) || res.Examined != 1 {
			t.Fatalf("batch from %v, examined %d; want from %v", res.From, res.Examined, wantFrom)
		}
		p, err := s.PushResultsPosition(ctx)
		if err != nil || p.Stored != wantStored || (wantStored && *p.After != res.Last) {
			t.Fatalf("stored position after the batch to %.20v = %+v, %v; stored want %v", res.Last, p, err, wantStored)
		}
		return res
	}
	step(nil, nil, true)
	res := step(nil, &keys[0], false) // ends at the long key: cleared
	step(&res.Last, &long, true)      // from the fallback; ends at the key at the bound: stored
	step(nil, &at, true)
}
