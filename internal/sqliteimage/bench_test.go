package sqliteimage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkBuild100k builds the image of a 100,000-row table of six
// columns, fed in keyset batches of 5,000 rows as the engine does.
func BenchmarkBuild100k(b *testing.B) {
	cols := []wire.Column{
		{Name: "id", Type: wire.TypeString},
		{Name: "project_id", Type: wire.TypeString},
		{Name: "title", Type: wire.TypeString, Nullable: true},
		{Name: "n", Type: wire.TypeInteger, Nullable: true},
		{Name: "score", Type: wire.TypeFloat, Nullable: true},
		{Name: "done", Type: wire.TypeBoolean},
	}
	rows := make([]sqliteimage.Row, 100_000)
	for i := range rows {
		rows[i] = sqliteimage.Row{ServerVersion: int64(i%7 + 1), Values: []wire.Value{
			{Str: fmt.Sprintf("task-%08d", i)}, {Str: "project-1"}, {Str: fmt.Sprintf("a task title number %d", i)},
			{Int: int64(i)}, {Float: float64(i) / 3}, {Bool: i%2 == 0},
		}}
	}
	dir := b.TempDir()
	var size int
	b.ResetTimer()
	for b.Loop() {
		img, err := sqliteimage.Build(context.Background(), dir, testMeta, cols, 0, batches(rows, 5000))
		if err != nil {
			b.Fatal(err)
		}
		size = len(img)
	}
	b.ReportMetric(float64(size), "bytes/image")
}
