package realtime

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// TestWriteAfterFlusherDeadline: a frame the flusher wrote (the socket's
// buffer was full, so the write waited under the write timeout) leaves no
// write deadline behind. A later send, written at once on the caller's
// goroutine, still goes out after the timeout has passed; it used to fail
// with the flusher's expired deadline and close the connection without a
// close frame or a count (10,000-socket fan-out runs lost a socket now and
// then: every later delta missed, no wake-up).
func TestWriteAfterFlusherDeadline(t *testing.T) {
	cl, sv := tcpPair(t)
	// The timeout bounds the flusher's whole write of the big frame: 1 s
	// was too short for the reader under -race on a loaded 2-vCPU machine
	// (20 of 32 MiB read, then the timeout closed the connection), and 3 s
	// at a load of 5 (26 of 32 MiB).
	const writeTO = 6 * time.Second
	var slow atomic.Int64
	c := newConn(sv, 16, 64<<20, writeTO, &slow)
	if c.rc == nil {
		t.Skip("no descriptor")
	}
	big := bytes.Repeat([]byte("x"), 32<<20) // more than the socket buffers take
	if err := c.send(binaryFrame(big)); err != nil {
		t.Fatal(err)
	}
	// The client reads the big frame only after a while: the rest of it
	// waits in the flusher.
	time.Sleep(50 * time.Millisecond)
	_ = cl.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := ws.ReadFrame(cl)
	if err != nil || len(f.Payload) != len(big) {
		t.Fatalf("big frame: %d bytes, err %v", len(f.Payload), err)
	}
	// Past the flusher's write timeout, a small frame goes out at once.
	time.Sleep(writeTO + 300*time.Millisecond)
	if err := c.send(textFrame([]byte(`{"event":"probe"}`))); err != nil {
		t.Fatalf("send after the timeout: %v", err)
	}
	_ = cl.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err = ws.ReadFrame(cl)
	if err != nil || string(f.Payload) != `{"event":"probe"}` {
		t.Fatalf("frame after the timeout: %q, err %v (connection closed: %v)", f.Payload, err, c.isClosing() || c.closedNow())
	}
	if n := slow.Load(); n != 0 {
		t.Errorf("%d closes for slowness", n)
	}
}

func (c *wsConn) closedNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
