package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// BenchmarkAppend measures commit appends (storetest.BenchmarkAppend) on
// a fresh schema per sub-benchmark.
func BenchmarkAppend(b *testing.B) {
	testURL(b)
	storetest.BenchmarkAppend(b, func(tb testing.TB) store.Store { return openStore(tb) })
}

// BenchmarkCommitWindow is the catch-up read at growing log sizes.
func BenchmarkCommitWindow(b *testing.B) {
	testURL(b)
	storetest.BenchmarkCommitWindow(b, openTest)
}

// BenchmarkScanPages is the page scan and boundary walk of a bootstrap.
func BenchmarkScanPages(b *testing.B) {
	testURL(b)
	storetest.BenchmarkScanPages(b, openTest)
}

// BenchmarkRawCommit is the database's own commit rate on this machine,
// the physical limit of durable appends: one-row INSERT transactions with
// the server's default synchronous_commit, from 1 and from 16 clients.
func BenchmarkRawCommit(b *testing.B) {
	testURL(b)
	for _, clients := range []int{1, 16} {
		b.Run(map[int]string{1: "clients=1", 16: "clients=16"}[clients], func(b *testing.B) {
			pool := newPool(b, newSchema(b), int32(clients))
			ctx := context.Background()
			if _, err := pool.Exec(ctx, "CREATE TABLE raw(id BIGSERIAL PRIMARY KEY, v INTEGER)"); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						tx, err := pool.Begin(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := tx.Exec(ctx, "INSERT INTO raw(v) VALUES (1)"); err != nil {
							b.Error(err)
							return
						}
						if err := tx.Commit(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
		})
	}
}

// BenchmarkRequestEntry measures a sync request's entry reads
// (storetest.BenchmarkRequestEntry) on Postgres.
func BenchmarkRequestEntry(b *testing.B) {
	storetest.BenchmarkRequestEntry(b, openTest)
}

// BenchmarkPublishSegment is a bootstrap page's segment store write, as
// bytes and as a zstd body.
func BenchmarkPublishSegment(b *testing.B) {
	testURL(b)
	storetest.BenchmarkPublishSegment(b, openTest)
}

// BenchmarkPushResultsPrune measures journal prune batches
// (storetest.BenchmarkPushResultsPrune) on Postgres.
func BenchmarkPushResultsPrune(b *testing.B) {
	storetest.BenchmarkPushResultsPrune(b, openTest)
}
