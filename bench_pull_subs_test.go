package syncgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// BenchmarkPullSubscriptions measures a pull round of a client with many
// subscriptions (an app syncing several tables and scopes), each caught
// up, after another client's commit outside them moved the partition's
// log: every section reads a window that holds nothing for it.
//
//	go test -run '^$' -bench BenchmarkPullSubscriptions -benchtime 500x .
func BenchmarkPullSubscriptions(b *testing.B) {
	for _, d := range benchDrivers() {
		for _, subs := range []int{1, 10, 30} {
			b.Run(fmt.Sprintf("%s/subs=%d", d.name, subs), func(b *testing.B) {
				url, sc := startE2EBenchServer(b, d)
				ctx := context.Background()
				writer, err := sspclient.New(url, "writer", sc, sspclient.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := writer.SyncUntilQuiet(ctx, 5); err != nil {
					b.Fatal(err)
				}
				for i := range subs {
					if _, err := writer.Upsert("tasks", taskRow(fmt.Sprintf("seed%d", i), fmt.Sprintf("p%d", i), "x")); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := writer.Push(ctx); err != nil {
					b.Fatal(err)
				}
				reader, err := sspclient.New(url, "reader", sc, sspclient.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for i := range subs {
					if err := reader.Subscribe(fmt.Sprintf("s%d", i), "tasks", map[string][]string{"project_id": {fmt.Sprintf("p%d", i)}}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := reader.SyncUntilQuiet(ctx, 10); err != nil {
					b.Fatal(err)
				}
				if n := len(reader.Rows("tasks")); n != subs {
					b.Fatalf("reader holds %d rows, want %d", n, subs)
				}
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					if _, err := writer.Upsert("tasks", taskRow(fmt.Sprintf("other%d", i), "elsewhere", "x")); err != nil {
						b.Fatal(err)
					}
					if _, err := writer.Push(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if _, err := reader.Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
