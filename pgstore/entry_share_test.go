package pgstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// TestRequestStateShared: concurrent request state reads of one partition,
// answered by shared reads (entry_share.go), get what each read alone
// gets: the partition, the serve gate, and the client's own record (with
// this process's deferred cursor write applied, none for a client without
// a record, each its own copy when a client asks twice); a partition
// without a row answers ErrNotFound to all of them.
func TestRequestStateShared(t *testing.T) {
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	const p = "p1"
	if _, err := s.TouchPartition(ctx, p, 1000, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	apply(t, s, p, task{id: "t1", project: "a", owner: "o"}.write(t, c, 1))
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		if i%4 == 3 {
			continue // no record
		}
		rec := store.ClientRecord{ClientID: id, ActorID: fmt.Sprintf("a%d", i), WireVersion: 3, Cursor: int64(i), UpdatedAtMs: 5000,
			Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {id}}}}}
		if err := s.PutClient(ctx, p, rec); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// A deferred cursor move, not written yet: read through the
			// overlay.
			moved := rec
			moved.Cursor, moved.UpdatedAtMs = int64(i)+100, 6000
			if err := s.DeferClient(ctx, p, "epoch-1", moved, rec.Cursor); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]store.RequestState{}
	for _, id := range ids {
		st, err := s.readRequestState(ctx, p, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = st
	}
	if w := want["c3"]; w.Client != nil {
		t.Fatalf("c3 has a record: %+v", *w.Client)
	}
	if w := want["c0"]; w.Client == nil || w.Client.Cursor != 100 {
		t.Fatalf("c0's deferred cursor is not read: %+v", w.Client)
	}
	for round := 0; round < 50 && (round < 3 || s.sharedEntries.Load() == 0); round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		got := make([]store.RequestState, 2*len(ids))
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				st, err := s.ReadRequestState(ctx, p, ids[i%len(ids)], 1)
				if err != nil {
					t.Error(err)
				}
				got[i] = st
			}()
		}
		close(start)
		wg.Wait()
		for i, st := range got {
			id := ids[i%len(ids)]
			w := want[id]
			if st.Partition != w.Partition || !reflect.DeepEqual(st.Gate, w.Gate) || (st.Client == nil) != (w.Client == nil) ||
				st.Client != nil && !reflect.DeepEqual(*st.Client, *w.Client) {
				t.Errorf("%s: %+v (client %+v), alone %+v (client %+v)", id, st, st.Client, w, w.Client)
			}
			if j := i + len(ids); j < len(got) && st.Client != nil && got[j].Client == st.Client {
				t.Errorf("%s: two answers share one record", id)
			}
		}
	}
	if s.sharedEntries.Load() == 0 {
		t.Fatal("no read was answered by a shared read")
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := s.ReadRequestState(ctx, "nowhere", id, 1); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("an unknown partition: %v; want ErrNotFound", err)
			}
		}()
	}
	close(start)
	wg.Wait()
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
