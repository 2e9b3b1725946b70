package syncgo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkPushOutbox measures one client flushing its outbox over real
// HTTP: benchOutboxCommits one-upsert commits per push request (a client
// back online; §7 lets a request carry up to 500 operations), one request
// at a time:
//
//	go test -run '^$' -bench BenchmarkPushOutbox -benchtime 5000x .
//
// Reported: commits/s, and the test process's CPU time per commit
// (server and client; not Postgres's).
func BenchmarkPushOutbox(b *testing.B) {
	for _, d := range benchDrivers() {
		b.Run(d.name, func(b *testing.B) {
			url, sc := startE2EBenchServer(b, d)
			c, err := sspclient.New(url, "bench-0", sc, sspclient.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.SyncUntilQuiet(context.Background(), 5); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := processCPU()
			start := time.Now()
			for done := 0; done < b.N; {
				n := min(benchOutboxCommits, b.N-done)
				for i := range n {
					if _, err := c.Upsert("tasks", taskRow(fmt.Sprintf("t%d", done+i), "p1", "x")); err != nil {
						b.Fatal(err)
					}
				}
				res, err := c.Push(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range res.Pushed {
					if o.Status != wire.PushApplied {
						b.Fatalf("push: %s", statusOf(o))
					}
				}
				if len(res.Pushed) != n {
					b.Fatalf("%d results for %d commits", len(res.Pushed), n)
				}
				done += n
			}
			elapsed := time.Since(start)
			cpu := processCPU() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/commit")
		})
	}
}

// benchOutboxCommits is the commits of one push request in
// BenchmarkPushOutbox.
const benchOutboxCommits = 200
