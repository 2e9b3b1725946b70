package engine

import (
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// BenchmarkBuildPages100k measures the cold build of a 100,000-row
// bootstrap's rows segments on sqlitestore, one page after another (no
// cache): the scans of ten 10,000-row pages and their SSG2 encoding.
func BenchmarkBuildPages100k(b *testing.B) {
	const total, limit = 100_000, 10_000
	st, sc := seedBenchTasks(b, total)
	e := New(Config{Store: st, Schema: sc, Segments: NewMemorySegments(1 << 30)})
	t, _ := sc.Table("tasks")
	l := pageLayout{table: "tasks", schemaVersion: 1, cols: t.WireColumns()}
	eff := wire.ScopeMap{{Key: "project_id", Values: []string{"project-1"}}}
	var bytes int
	for b.Loop() {
		rows, pages := 0, 0
		bytes = 0
		var after *string
		for {
			pg, err := e.buildPage(b.Context(), "p", l, eff, after, limit)
			if err != nil {
				b.Fatal(err)
			}
			rows += pg.rowCount
			bytes += len(pg.bytes)
			pages++
			if pg.last == nil {
				break
			}
			after = pg.last
		}
		if rows != total || pages != total/limit {
			b.Fatalf("%d rows in %d pages, want %d in %d", rows, pages, total, total/limit)
		}
	}
	b.ReportMetric(float64(bytes), "bytes/bootstrap")
}
