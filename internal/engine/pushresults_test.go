package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A retention round's journal prune is bounded: it examines at most its
// row budget (whole batches), keeps its position, and the next rounds go
// on from there until the journal's end, where the position starts over;
// the records it deletes are counted.
func TestPrunePushResultsPassBounded(t *testing.T) {
	ctx := context.Background()
	sc, err := schema.New(1).Table("tasks", "id", schema.String("id"), schema.String("project_id")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TouchPartition(ctx, "p", 1, "epoch"); err != nil {
		t.Fatal(err)
	}
	const total = 2*pushResultsBatch + pushResultsBatch/2
	err = st.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		for i := range total {
			rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: 1, RecordedAtMs: 1000, Results: []wire.OpResult{}}
			if _, err := tx.PutPushResult(ctx, "c", fmt.Sprintf("cc-%06d", i), rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	now := (40 * 24 * time.Hour).Milliseconds()
	e := New(Config{Store: st, Schema: sc, Now: func() int64 { return now }})
	var pos journalPosition
	for i, want := range []int64{pushResultsBatch, pushResultsBatch, pushResultsBatch / 2} {
		n, skipped, err := e.prunePushResultsPass(ctx, &pos, 30*24*time.Hour, pushResultsBatch)
		if err != nil || skipped || n != want {
			t.Fatalf("round %d: deleted %d, skipped %v, %v; want %d", i, n, skipped, err, want)
		}
		if end := i == 2; (pos.after == nil) != end {
			t.Fatalf("round %d: position %v; want it kept until the journal's end, then cleared", i, pos.after)
		}
	}
	if got := e.PushResultsPruned(); got != total {
		t.Fatalf("PushResultsPruned = %d; want %d", got, total)
	}
	if n, _, err := e.prunePushResultsPass(ctx, &pos, 0, pushResultsBatch); err != nil || n != 0 {
		t.Fatalf("with the setting off: deleted %d, %v; want nothing", n, err)
	}
}
