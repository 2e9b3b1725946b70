package syncgo_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
)

// TestDistinctSocketsLeaveNothing: sockets of distinct clients, actors
// and partitions that connect once and leave (devices that never come
// back) leave no goroutine and no live heap behind: the heap after 5,000
// more such sockets grows by less than 128 bytes per socket and the
// goroutines are as many as before, once every socket detached.
func TestDistinctSocketsLeaveNothing(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.Authenticate = func(r *http.Request) (syncgo.Auth, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			actor, part, found := strings.Cut(tok, "@")
			if !ok || !found {
				return syncgo.Auth{}, errors.New("want a bearer token actor@partition")
			}
			return syncgo.Auth{ActorID: actor, Partition: part}, nil
		}
	})
	n := 0
	visit := func(count int) {
		for range count {
			id := strconv.Itoa(n)
			n++
			// Not e.dial: its cleanup would hold every socket's buffers.
			s, err := rtDial(context.Background(), rtDialer("actor-"+id+"@tenant-"+id), e.wsURL("client-"+id), 8)
			if err != nil {
				t.Fatal(err)
			}
			s.t, s.clientID = t, "client-"+id
			s.startReading()
			s.hello()
			_ = s.nc.Close()
			<-s.done
		}
		eventually(t, "every socket detached", func() bool {
			return e.srv.RealtimeStats().Sessions == 0 && e.srv.RealtimePartitionsForTest() == 0
		})
	}
	settled := func() (uint64, int) {
		time.Sleep(100 * time.Millisecond) // the server's handler goroutines return
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, runtime.NumGoroutine()
	}
	visit(300)
	heap0, g0 := settled()
	const more = 5000
	visit(more)
	heap1, g1 := settled()
	t.Logf("live heap %d → %d bytes, goroutines %d → %d over %d more sockets", heap0, heap1, g0, g1, more)
	if g1 > g0+2 {
		t.Errorf("%d goroutines after %d more sockets came and went, %d before; want as many", g1, more, g0)
	}
	if heap1 > heap0 && (heap1-heap0)/more >= 128 {
		t.Errorf("live heap grew from %d to %d bytes (%d per socket) over %d sockets of distinct clients that came and went; want under 128 per socket",
			heap0, heap1, (heap1-heap0)/more, more)
	}
}
