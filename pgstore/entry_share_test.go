package pgstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// TestRequestStateShared: concurrent request state reads of one partition,
// answered by shared reads (entry_share.go), get what each read alone
// gets (storetest.CheckSharedEntries), and no queue is left behind.
func TestRequestStateShared(t *testing.T) {
	s := openStore(t)
	sc := storetest.FixtureSchema(t)
	ensure(t, s, sc)
	storetest.CheckSharedEntries(t, s, sc.Version(), func(ctx context.Context, p, id string) (store.RequestState, error) {
		return s.readRequestState(ctx, p, id, sc.Version())
	}, s.sharedEntries.Load)
	if n := queuesLeft(s.entries.Pending); n != 0 {
		t.Errorf("%d entry queues left after the reads", n)
	}
}

// BenchmarkRequestEntryShared reads the request state of 64 clients of one
// partition from 64 goroutines at once, as the entries of a rounds
// workload's requests: each read alone (read=alone, what every request
// did before) or through ReadRequestState, which shares a round trip among
// the reads that queue while one is in flight (read=shared). Figures: the
// round trips and the backend CPU per read.
func BenchmarkRequestEntryShared(b *testing.B) {
	s, rt := openCounted(b, 6)
	c := testSchema(b, 1)
	ensure(b, s, c)
	ctx := context.Background()
	const p, clients = "bench", 64
	if _, err := s.TouchPartition(ctx, p, 1000, "epoch-1"); err != nil {
		b.Fatal(err)
	}
	for i := range clients {
		rec := store.ClientRecord{ClientID: fmt.Sprintf("c%d", i), ActorID: "a", WireVersion: 3, UpdatedAtMs: 5000,
			Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"x"}}}}}
		if err := s.PutClient(ctx, p, rec); err != nil {
			b.Fatal(err)
		}
	}
	for _, read := range []struct {
		name string
		fn   func(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error)
	}{{"alone", s.readRequestState}, {"shared", s.ReadRequestState}} {
		b.Run("read="+read.name, func(b *testing.B) {
			cpu0, cpuOK := backendCPU(b, s)
			trips := rt.n.Load()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("c%d", g)
					for next.Add(1) <= int64(b.N) {
						if st, err := read.fn(ctx, p, id, 1); err != nil || st.Client == nil {
							b.Errorf("ReadRequestState = %+v, %v", st, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(rt.n.Load()-trips)/float64(b.N), "roundtrips/read")
			if cpu1, ok := backendCPU(b, s); ok && cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "pg-µs/read")
			}
		})
	}
}
