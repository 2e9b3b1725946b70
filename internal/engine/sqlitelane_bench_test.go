package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkBuildImage100k measures the sqlite lane's cold build of a
// 100,000-row, six-column table on sqlitestore: the keyset scans, the row
// decoding, the image build and its publication.
func BenchmarkBuildImage100k(b *testing.B) {
	const total = 100_000
	ctx := context.Background()
	st, sc := seedBenchTasks(b, total)
	e := New(Config{Store: st, Schema: sc, Segments: NewMemorySegments(1 << 30)})
	t, _ := sc.Table("tasks")
	eff := wire.ScopeMap{{Key: "project_id", Values: []string{"project-1"}}}
	key := imageKey{partition: "p", epoch: "epoch", table: "tasks", digest: wire.ScopeDigest(map[string][]string{"project_id": {"project-1"}}),
		schemaVersion: 1, asOf: int64(total / 5000)}
	var ref imageRef
	b.ResetTimer()
	for b.Loop() {
		probe, err := st.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: eff, Limit: 1001})
		if err != nil {
			b.Fatal(err)
		}
		ref, err = e.buildImage(ctx, key, t, eff, probe)
		if err != nil {
			b.Fatal(err)
		}
	}
	if ref.rowCount != total {
		b.Fatalf("image of %d rows, want %d", ref.rowCount, total)
	}
	b.ReportMetric(float64(ref.byteLength), "bytes/image")
}

// seedBenchTasks opens a sqlitestore in a temporary directory with a
// six-column tasks table of total rows, all in scope project_id
// project-1 of partition p, written in commits of 5,000 rows.
func seedBenchTasks(b testing.TB, total int) (*sqlitestore.Store, *schema.Compiled) {
	b.Helper()
	ctx := context.Background()
	sc, err := schema.New(1).Table("tasks", "id",
		schema.String("id"), schema.String("project_id"), schema.String("title").Null(),
		schema.Integer("n").Null(), schema.Float("score").Null(), schema.Boolean("done")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		b.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(b.TempDir(), "sync.db"), Synchronous: "OFF"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if err := st.EnsureSchema(ctx, sc); err != nil {
		b.Fatal(err)
	}
	if _, err := st.TouchPartition(ctx, "p", 1, "epoch"); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < total; from += 5000 {
		var writes []store.RowWrite
		var changes []store.Change
		for i := from; i < from+5000; i++ {
			w := storetest.NewRowWrite(b, sc, "tasks", []wire.Value{
				{Str: fmt.Sprintf("task-%08d", i)}, {Str: "project-1"}, {Str: fmt.Sprintf("a task title number %d", i)},
				{Int: int64(i)}, {Float: float64(i) / 3}, {Bool: i%2 == 0}}, 1)
			writes = append(writes, w)
			changes = append(changes, storetest.UpsertChange(w))
		}
		err := st.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			for _, w := range writes {
				if err := tx.UpsertRow(ctx, w); err != nil {
					return err
				}
			}
			_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: fmt.Sprint(from), ActorID: "a", Changes: changes})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return st, sc
}
