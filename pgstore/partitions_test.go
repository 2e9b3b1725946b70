package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestPartitionsAndEpochs(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	if _, err := s.Partition(ctx, "p"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown partition: %v", err)
	}
	p, err := s.TouchPartition(ctx, "p", 10, "e1")
	if err != nil || p.LogEpoch != "e1" || p.EpochRequired || p.LastAuthenticatedAtMs != 10 || p.MaxCommitSeq != 0 {
		t.Fatalf("TouchPartition = %+v, %v", p, err)
	}
	apply(t, s, "p", task{id: "a", project: "p1", owner: "o"}.write(t, c, 1))
	if p, err = s.TouchPartition(ctx, "p", 20, "e2"); err != nil || p.LogEpoch != "e1" || p.LastAuthenticatedAtMs != 20 || p.MaxCommitSeq != 1 {
		t.Errorf("second TouchPartition = %+v, %v", p, err)
	}
	if err := s.PutClient(ctx, "p", store.ClientRecord{ClientID: "c", ActorID: "a", WireVersion: 3, Cursor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.RotateLogEpoch(ctx, "p", "e3", 30); err != nil {
		t.Fatal(err)
	}
	if p, err = s.Partition(ctx, "p"); err != nil || p.LogEpoch != "e3" || !p.EpochRequired || p.MaxCommitSeq != 1 {
		t.Errorf("after rotation: %+v, %v", p, err)
	}
	if _, err := s.Client(ctx, "p", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("client after rotation: %v", err)
	}
}

func TestClients(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ensure(t, s, testSchema(t, 1))
	ctx := context.Background()
	if _, err := s.TouchPartition(ctx, "p", 1, "e"); err != nil {
		t.Fatal(err)
	}
	rec := store.ClientRecord{ClientID: "c", ActorID: "alice", WireVersion: 3, Cursor: 5, UpdatedAtMs: 100,
		Subscriptions: []store.SubscriptionRecord{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}}
	if err := s.PutClient(ctx, "p", rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Client(ctx, "p", "c")
	if err != nil || got.ActorID != "alice" || got.WireVersion != 3 || got.Cursor != 5 || len(got.Subscriptions) != 1 ||
		got.Subscriptions[0].Scopes["project_id"][0] != "p1" {
		t.Errorf("Client = %+v, %v", got, err)
	}
	adv := func(a store.CursorAdvance) (bool, error) {
		t.Helper()
		a.ClientID, a.AtMs = "c", 200
		if a.LogEpoch == "" {
			a.LogEpoch = "e"
		}
		return s.AdvanceClientCursor(ctx, "p", a)
	}
	for _, tc := range []struct {
		a    store.CursorAdvance
		want bool
	}{
		{store.CursorAdvance{ActorID: "bob", Cursor: 9}, false},
		{store.CursorAdvance{ActorID: "alice", Cursor: 4}, false},
		{store.CursorAdvance{ActorID: "alice", Cursor: 9}, true},
		{store.CursorAdvance{ActorID: "alice", Cursor: 9}, false},
		{store.CursorAdvance{ClientID: "nobody", ActorID: "alice", Cursor: 10}, true}, // ClientID reset to c
	} {
		if ok, err := adv(tc.a); ok != tc.want || err != nil {
			t.Errorf("advance %+v = %t, %v; want %t", tc.a, ok, err, tc.want)
		}
	}
	if _, err := adv(store.CursorAdvance{ActorID: "alice", Cursor: 11, LogEpoch: "stale"}); !errors.Is(err, store.ErrEpochMismatch) {
		t.Errorf("stale epoch: %v", err)
	}
	if ok, err := s.AdvanceClientCursor(ctx, "p", store.CursorAdvance{ClientID: "new", ActorID: "x", LogEpoch: "e", Cursor: 1}); ok || err != nil {
		t.Errorf("advance of an absent client = %t, %v", ok, err)
	}
	if _, err := s.Client(ctx, "p", "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("advance created a client: %v", err)
	}
	if got, _ := s.Client(ctx, "p", "c"); got.Cursor != 10 || got.UpdatedAtMs != 200 {
		t.Errorf("after advances: %+v", got)
	}
	for _, r := range []store.ClientRecord{
		{ClientID: "old", ActorID: "a", Cursor: 1, UpdatedAtMs: 50},
		{ClientID: "none", ActorID: "a", Cursor: -1, UpdatedAtMs: 300},
		{ClientID: "low", ActorID: "a", Cursor: 7, UpdatedAtMs: 150},
	} {
		if err := s.PutClient(ctx, "p", r); err != nil {
			t.Fatal(err)
		}
	}
	if floor, ok, err := s.ActiveCursorFloor(ctx, "p", 100); floor != 7 || !ok || err != nil {
		t.Errorf("ActiveCursorFloor = %d, %t, %v", floor, ok, err)
	}
	if _, ok, err := s.ActiveCursorFloor(ctx, "p", 1000); ok || err != nil {
		t.Errorf("ActiveCursorFloor with no active clients = %t, %v", ok, err)
	}
}

func TestPruneThrough(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	if _, err := s.TouchPartition(ctx, "p", 1, "e"); err != nil {
		t.Fatal(err)
	}
	var rows []store.RowWrite
	for _, id := range []string{"a", "b", "c", "d"} {
		w := task{id: id, project: "p1", owner: "o"}.write(t, c, 1)
		rows = append(rows, w)
		apply(t, s, "p", w)
	}
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error { // 5: delete a
		if err := tx.DeleteRow(ctx, "tasks", "a"); err != nil {
			return err
		}
		_, err := tx.AppendCommit(ctx, commitOf("del", store.Change{Table: "tasks", RowID: "a", Op: wire.OpDelete, Scopes: rows[0].Scopes}))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, "other", rows[0])
	err = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		seq, ok, err := tx.Tombstone(ctx, "tasks", "a")
		if seq != 5 || !ok || err != nil {
			t.Errorf("Tombstone = %d, %t, %v", seq, ok, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneThrough(ctx, "p", "wrong", 3); !errors.Is(err, store.ErrEpochMismatch) || store.ErrorCode(err) != store.CodePruneEpochMismatch {
		t.Errorf("prune with a wrong epoch: %v", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM sync_commits WHERE partition = 'p'`); n != 5 {
		t.Errorf("commits after a refused prune: %d", n)
	}
	for _, tc := range []struct {
		through, horizon, deleted int64
	}{
		{2, 2, 2}, {1, 2, 0}, {3, 3, 1}, {99, 5, 2}, {99, 5, 0},
	} {
		res, err := s.PruneThrough(ctx, "p", "e", tc.through)
		if err != nil || res.HorizonSeq != tc.horizon || res.CommitsDeleted != tc.deleted {
			t.Errorf("PruneThrough(%d) = %+v, %v; want horizon %d, %d deleted", tc.through, res, err, tc.horizon, tc.deleted)
		}
	}
	for _, table := range []string{"sync_commits", "sync_changes", "sync_change_scopes", "sync_tombstones"} {
		if n := queryInt(t, s, `SELECT count(*) FROM `+table+` WHERE partition = 'p'`); n != 0 {
			t.Errorf("%s: %d rows of p left", table, n)
		}
		if n := queryInt(t, s, `SELECT count(*) FROM `+table+` WHERE partition = 'other'`); n == 0 && table != "sync_tombstones" {
			t.Errorf("%s: the other partition was pruned", table)
		}
	}
	if p, _ := s.Partition(ctx, "p"); p.HorizonSeq != 5 || p.MaxCommitSeq != 5 {
		t.Errorf("partition after prune: %+v", p)
	}
	if seq := apply(t, s, "p", rows[1]); seq != 6 {
		t.Errorf("append after prune: seq %d", seq)
	}
	if seq, err := s.CommitSeqBefore(ctx, "p", 1001); seq != 6 || err != nil {
		t.Errorf("CommitSeqBefore = %d, %v", seq, err)
	}
	if seq, err := s.CommitSeqBefore(ctx, "p", 1000); seq != 0 || err != nil {
		t.Errorf("CommitSeqBefore(earliest) = %d, %v", seq, err)
	}
	// A partition without a registry entry has the epoch "".
	if res, err := s.PruneThrough(ctx, "other", "", 1); err != nil || res.CommitsDeleted != 1 {
		t.Errorf("prune of an unregistered partition = %+v, %v", res, err)
	}
}
