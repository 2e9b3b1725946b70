package syncgo_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
)

// stallMessage writes the header of a binary message declaring n bytes,
// and the first k of them; the rest never comes.
func (s *rtSock) stallMessage(n int64, k int) {
	s.t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	h := ws.Header{Fin: true, OpCode: ws.OpBinary, Masked: true, Mask: ws.NewMask(), Length: n}
	if err := ws.WriteHeader(s.nc, h); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.nc.Write(make([]byte, k)); err != nil {
		s.t.Fatal(err)
	}
}

// A socket message that declares 32 MiB and stalls holds the bytes that
// arrived, not the declared length (issue 15, finding 8).
func TestRealtimeStalledMessageMemoryBounded(t *testing.T) {
	e := newRTEnv(t)
	const sockets = 10
	const declared = 32<<20 - 64
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	for i := range sockets {
		s := e.dial("mallory", "stall-"+strconv.Itoa(i))
		s.hello()
		s.stallMessage(declared, 4096)
	}
	// Nothing observable tells when the server has read the headers: watch
	// the heap for a while; the declared lengths would be 320 MiB at once.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if grown := int64(m.HeapAlloc) - int64(base.HeapAlloc); grown > 64<<20 {
			t.Fatalf("%d stalled sockets grew the heap by %d MiB", sockets, grown>>20)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The server still serves.
	e.dial("alice", "after").hello()
}

// A socket message whose bytes stop arriving is cut off after the stall
// timeout; a socket silent between messages is not.
func TestRealtimeStalledMessageTimesOut(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	idle := e.dial("alice", "idle")
	idle.hello()
	s := e.dial("mallory", "stall")
	s.hello()
	s.stallMessage(1<<20, 100)
	s.closed(rtWait)
	// The idle socket (silent between messages, after a ping, for twice
	// the stall timeout) is still served.
	if err := idle.write(ws.OpPing, []byte("p")); err != nil {
		t.Fatalf("idle socket: %v", err)
	}
	select {
	case <-idle.done:
		t.Fatalf("idle socket closed: %v", idle.endErr)
	case <-time.After(600 * time.Millisecond):
	}
}
