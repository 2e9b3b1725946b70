package pgstore

import (
	"context"
	"errors"
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
