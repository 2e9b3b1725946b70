package pgstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestLargeCommitIsChunked(t *testing.T) {
	t.Parallel()
	s := openIn(t, newSchema(t), Config{MaxChangesPerStatement: 3})
	c := testSchema(t, 1)
	ensure(t, s, c)
	var changes []store.Change
	for i := range 10 {
		w := task{id: fmt.Sprintf("t%02d", i), project: fmt.Sprintf("p%d", i%5), owner: "o"}.write(t, c, 1)
		changes = append(changes, upsertChange(w))
		if i%4 == 0 {
			changes = append(changes, store.Change{Table: "tasks", RowID: w.RowID, Op: wire.OpDelete, Scopes: w.Scopes})
		}
	}
	err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, commitOf("big", changes...))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for sql, want := range map[string]int64{
		`SELECT count(*) FROM sync_changes`:       int64(len(changes)),
		`SELECT count(*) FROM sync_change_scopes`: 6, // 5 projects + 1 owner
		`SELECT count(*) FROM sync_tombstones`:    3,
	} {
		if n := queryInt(t, s, sql); n != want {
			t.Errorf("%s = %d; want %d", sql, n, want)
		}
	}
	w, err := s.ReadCommitWindow(context.Background(), "p", store.CommitWindowQuery{
		Table: "tasks", Scopes: scope("owner_id", "o"), ThroughSeq: 1,
	})
	if err != nil || len(w.Commits) != 1 || len(w.Commits[0].Changes) != len(changes) {
		t.Fatalf("window = %+v, %v", w, err)
	}
	for i, ch := range w.Commits[0].Changes {
		if want := changes[i]; ch.RowID != want.RowID || ch.Op != want.Op || ch.RowVersion != want.RowVersion {
			t.Errorf("change %d = %+v; want %+v", i, ch, want)
		}
	}
}
