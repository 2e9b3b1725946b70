package syncgo_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// pullAs makes one authenticated sync request (a header and an empty
// pull) as token, which touches the token's partition.
func pullAs(t *testing.T, e *e2eEnv, token, clientID string) {
	t.Helper()
	r, err := e.postAs(token, encodeRequest(t, &wire.Request{Version: 3,
		Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows}}))
	if err != nil {
		t.Fatal(err)
	}
	decodeResponse(t, r)
}

// TestTouchedPartitionsForgotten: the engine remembers each partition it
// served (to touch the registry at most once a second, and for the
// retention rounds). Partitions come from the tokens: a multi-tenant
// server that runs for months sees every tenant that ever made a request.
// With retention off, a partition not served for a touch interval is
// forgotten; with retention on, once a round pruned it after age_force
// of idleness (nothing this process wrote is left to prune). Both
// drivers.
func TestTouchedPartitionsForgotten(t *testing.T) {
	const tenants = 3000
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		t.Run("retention off", func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Now().UnixMilli())
			e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Now = now.Load })
			for i := range tenants {
				now.Add(1500) // past the touch interval (1 s)
				pullAs(t, e, "alice@tenant-"+strconv.Itoa(i), "c")
			}
			if n := e.srv.TouchedPartitionsForTest(); n > 1100 {
				t.Fatalf("the engine remembers %d partitions after %d tenants each pulled once, 1.5 s apart, with no retention; want at most 1100", n, tenants)
			}
		})
		t.Run("retention on", func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Now().UnixMilli())
			e := newE2EEnv(t, d, func(c *syncgo.Config) {
				c.Now = now.Load
				c.RetentionInterval = 20 * time.Millisecond
			})
			for i := range tenants {
				pullAs(t, e, "alice@tenant-"+strconv.Itoa(i), "c")
			}
			// One tenant's log is longer than min_retained_commits (1000):
			// it must still be pruned before it is forgotten.
			const logged = 1100
			p0, err := e.store.Partition(context.Background(), "tenant-0")
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < logged; b += 100 {
				cs := make([]*wire.PushCommit, 0, 100)
				for i := b; i < b+100; i++ {
					cs = append(cs, &wire.PushCommit{ClientCommitID: "k" + strconv.Itoa(i), Operations: []wire.Operation{
						e.upsertOp(t, map[string]any{"id": "t" + strconv.Itoa(i), "project_id": "p1", "title": "x", "done": false, "rank": nil, "notes": nil})}})
				}
				r, err := e.postAs("alice@tenant-0", encodeRequest(t, &wire.Request{Version: 3,
					Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &p0.LogEpoch}, Commits: cs}))
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range decodeResponse(t, r).Frames {
					if pr, ok := f.(*wire.PushResult); ok && pr.Status != wire.PushApplied {
						t.Fatalf("push %s: %+v", pr.ClientCommitID, pr)
					}
				}
			}
			if p, err := e.store.Partition(context.Background(), "tenant-0"); err != nil || p.MaxCommitSeq != logged || p.HorizonSeq != 0 {
				t.Fatalf("tenant-0 = %+v, %v; want %d commits, none pruned yet", p, err, logged)
			}
			if n := e.srv.TouchedPartitionsForTest(); n != tenants {
				t.Fatalf("the engine remembers %d partitions of %d served just now; want all (retention prunes them)", n, tenants)
			}
			now.Add((31 * 24 * time.Hour).Milliseconds()) // past age_force (30 days)
			pullAs(t, e, "alice@fresh", "c")
			deadline := time.Now().Add(60 * time.Second)
			for n := e.srv.TouchedPartitionsForTest(); n != 1; n = e.srv.TouchedPartitionsForTest() {
				if time.Now().After(deadline) {
					t.Fatalf("the engine remembers %d partitions, %d of them idle past age_force and pruned since; want 1 (the one served now)", n, tenants)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if p, err := e.store.Partition(context.Background(), "tenant-0"); err != nil || p.HorizonSeq != logged-1000 {
				t.Fatalf("tenant-0 = %+v, %v; want its log pruned to the newest 1000 commits (horizon %d) before it was forgotten", p, err, logged-1000)
			}
		})
	})
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestDistinctClientsLeaveNoHeap: a server that runs for months meets
// clients, actors and partitions once each (devices that never come
// back, tenants that leave). Once they are gone, what the process
// remembers of them must not grow with their number: here 8,000 each
// pull once, with their own actor, partition and client id, and the live
// heap must grow by less than 64 bytes per client between the first
// 2,000 and the next 6,000 (the set of partitions served grew by about
// 200 bytes each). Both drivers in turn, retention off.
func TestDistinctClientsLeaveNoHeap(t *testing.T) {
	eachDriverInTurn(t, func(t *testing.T, d e2eDriver) {
		var now atomic.Int64
		now.Store(time.Now().UnixMilli())
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Now = now.Load })
		n := 0
		visit := func(count int) {
			for range count {
				now.Add(1100) // past the touch interval (1 s)
				id := strconv.Itoa(n)
				pullAs(t, e, "actor-"+id+"@tenant-"+id, "client-"+id)
				n++
			}
		}
		visit(2000)
		before := liveHeap()
		const more = 6000
		visit(more)
		after := liveHeap()
		if after > before && (after-before)/more >= 64 {
			t.Fatalf("live heap grew from %d to %d bytes (%d per client) over %d distinct clients, actors and partitions that pulled once; want under 64 bytes per client",
				before, after, (after-before)/more, more)
		}
		t.Logf("live heap %d → %d bytes over %d more clients", before, after, more)
	})
}
