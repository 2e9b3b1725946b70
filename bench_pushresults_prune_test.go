package syncgo_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	syncgo "github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestMeasurePushResultsPrune measures the push-result journal prune
// (BENCHMARKS.md, "Push-result journal prune"): on each driver, a journal
// of SYNCGO_MEASURE_PRUNE_ROWS rows (half recorded 60 days ago) is pruned
// alone, then seeded again and pruned while 8 writers push one-commit
// requests over HTTP, beside a run of the same push load alone. Skipped
// unless the variable is set: it takes minutes.
func TestMeasurePushResultsPrune(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv("SYNCGO_MEASURE_PRUNE_ROWS"))
	if rows <= 0 {
		t.Skip("SYNCGO_MEASURE_PRUNE_ROWS is not set")
	}
	const writers, day = 8, 24 * time.Hour
	pol := syncgo.RetentionPolicy{PushResultsMaxAge: 30 * day}
	for _, d := range e2eDrivers {
		t.Run(d.name, func(t *testing.T) {
			e := newE2EEnv(t, d)
			ctx := context.Background()
			seedClient := e.client("alice", sspclient.Options{})
			syncQuiet(t, seedClient)
			epoch := e.partitionState().LogEpoch
			seed := func(round int) {
				start := time.Now()
				now := time.Now().UnixMilli()
				for from := 0; from < rows; from += 10_000 {
					err := e.store.Write(ctx, e2ePartition, func(ctx context.Context, tx store.WriteTx) error {
						for i := from; i < min(rows, from+10_000); i++ {
							at := now
							if i%2 == 0 {
								at = now - (60 * day).Milliseconds()
							}
							rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: int64(i + 1), RecordedAtMs: at, CacheIdentity: "0123456789abcdef",
								ActorID: "alice", Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}}
							if _, err := tx.PutPushResult(ctx, fmt.Sprintf("seed-%d-%05d-0000-4000-8000-000000000000", round, i/1000),
								fmt.Sprintf("%08x-0000-4000-8000-%012x", i, round), rec); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("seeded %d journal rows in %v", rows, time.Since(start).Round(time.Millisecond))
			}
			prune := func() (int64, time.Duration) {
				start := time.Now()
				n, err := e.srv.PrunePushResults(ctx, pol)
				if err != nil {
					t.Fatal(err)
				}
				return n, time.Since(start)
			}
			var seq atomic.Int64
			load := func(stop <-chan struct{}) (int, []time.Duration) {
				var (
					mu   sync.Mutex
					lats []time.Duration
					wg   sync.WaitGroup
				)
				for w := range writers {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							i := seq.Add(1)
							req := encodeRequest(t, &wire.Request{Version: wire.Version3,
								Header: &wire.ReqHeader{ClientID: fmt.Sprintf("writer-%d", w), SchemaVersion: 1, LogEpoch: &epoch},
								Commits: []*wire.PushCommit{{ClientCommitID: fmt.Sprintf("load-%012d", i),
									Operations: []wire.Operation{e.upsertOp(t, taskRow(fmt.Sprintf("t%d", i%1000), "p1", "x"))}}}})
							start := time.Now()
							r := e.post(t, body(req), nil)
							d := time.Since(start)
							if r.status != 200 {
								t.Errorf("push: HTTP %d", r.status)
								return
							}
							mu.Lock()
							lats = append(lats, d)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				return len(lats), lats
			}
			report := func(what string, n int, lats []time.Duration, dur time.Duration) {
				slices.Sort(lats)
				q := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
				t.Logf("%s: %d pushes in %v = %.0f/s; latency p50 %v p99 %v max %v", what, n, dur.Round(time.Millisecond),
					float64(n)/dur.Seconds(), q(.5), q(.99), lats[len(lats)-1])
			}

			seed(0)
			n, took := prune()
			t.Logf("prune alone: %d of %d rows deleted in %v = %.0f deleted/s, %.0f examined/s", n, rows, took.Round(time.Millisecond),
				float64(n)/took.Seconds(), float64(rows)/took.Seconds())

			seed(1)
			stop := make(chan struct{})
			time.AfterFunc(5*time.Second, func() { close(stop) })
			start := time.Now()
			cnt, lats := load(stop)
			report("pushes alone", cnt, lats, time.Since(start))

			stop = make(chan struct{})
			var (
				pn    int64
				ptook time.Duration
			)
			start = time.Now()
			go func() {
				pn, ptook = prune()
				close(stop)
			}()
			cnt, lats = load(stop)
			report("pushes during the prune", cnt, lats, time.Since(start))
			t.Logf("prune under load: %d deleted in %v = %.0f deleted/s", pn, ptook.Round(time.Millisecond), float64(pn)/ptook.Seconds())
		})
	}
}
