package syncgo_test

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// A gzip bomb is refused quickly with bounded memory (§1.3, the request
// size cap): a valid request head followed by 1 GiB of zeros in skippable
// (unknown, reserved) frames, gzip-compressed and streamed, is answered
// 413 once the decompressed body passes MaxRequestBytes. The test does not
// run in parallel, so that the heap it measures is its own.
func TestE2EGzipBomb(t *testing.T) {
	for _, d := range e2eDrivers {
		t.Run(d.name, func(t *testing.T) {
			e := newE2EEnv(t, d, func(c *syncgo.Config) { c.MaxRequestBytes = 4 << 20 })
			var handlerRead atomic.Int64 // compressed body bytes the handler read
			counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Body = &countingBody{ReadCloser: r.Body, n: &handlerRead}
				e.srv.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(counted.Close)
			e.url = counted.URL
			seed := e.client("alice", sspclient.Options{})
			mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
			syncQuiet(t, seed)
			epoch := e.partitionState().LogEpoch
			head := encodeRequest(t, &wire.Request{Version: 3,
				Header:  &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: hostileCommit, Operations: []wire.Operation{e.upsertOp(t, taskRow("h1", "p1", "bomb"))}}}})
			head = head[:len(head)-5] // END comes after the bomb

			// The producer streams the bomb, but pauses after 32 MiB (far
			// past the cap) until the answer arrives: a server that waits
			// for more of the body before answering (net/http's drain of
			// an unread body) stalls here until the 30 s safety timeout,
			// which the test then reports (stalled), however loaded the
			// machine.
			const frameBytes, frames, pauseAt = 1 << 20, 1024, 32 // 1 GiB of zeros
			var produced atomic.Int64
			var stalled atomic.Bool
			answered := make(chan struct{})
			pr, pw := io.Pipe()
			go func() {
				zw, _ := gzip.NewWriterLevel(pw, gzip.BestCompression)
				zeros := make([]byte, frameBytes)
				if _, err := zw.Write(head); err != nil {
					return
				}
				// 0x20 is reserved: an unknown frame a decoder skips (§1.2).
				hdr := binary.LittleEndian.AppendUint32([]byte{0x20}, frameBytes)
				for i := range frames {
					if i == pauseAt {
						if zw.Flush() != nil {
							return
						}
						select {
						case <-answered:
						case <-time.After(30 * time.Second):
							stalled.Store(true)
						}
					}
					if _, err := zw.Write(hdr); err != nil {
						return
					}
					if _, err := zw.Write(zeros); err != nil {
						return
					}
					produced.Add(frameBytes)
				}
				_, _ = zw.Write(frame(wire.FrameEnd, nil))
				pw.CloseWithError(zw.Close())
			}()

			before := e.snapshot(t, hostileClient, hostileCommit)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak atomic.Uint64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				var m runtime.MemStats
				for {
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peak.Load() {
						peak.Store(m.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
			}()

			start := time.Now()
			r := e.post(t, pr, map[string]string{"Content-Encoding": "gzip"})
			elapsed := time.Since(start)
			close(answered)
			_ = pr.CloseWithError(io.ErrClosedPipe) // stop the producer
			close(stop)
			<-sampled

			wantJSONError(t, r, http.StatusRequestEntityTooLarge, syncerr.CodeInvalidRequest)
			if stalled.Load() {
				t.Fatalf("the bomb took %v to refuse: the server waited for more of the refused body", elapsed)
			}
			// The compressed bomb is about 1 MiB; inflating 4 MiB of it
			// takes a few KiB.
			if n := handlerRead.Load(); n > 256<<10 {
				t.Fatalf("the handler read %d KiB of the compressed bomb before refusing", n>>10)
			}
			if !r.close {
				t.Fatal("the refusal keeps the connection: net/http drains up to 256 KiB of the unread body first")
			}
			if growth := int64(peak.Load()) - int64(base); growth > 64<<20 {
				t.Fatalf("heap in use grew by %d MiB during the bomb, want far below its 1024 MiB", growth>>20)
			}
			if after := e.snapshot(t, hostileClient, hostileCommit); !after.equal(before) {
				t.Fatalf("the bomb changed the database:\nbefore %+v\nafter  %+v", before, after)
			}
			t.Logf("refused in %v; the handler read %d KiB compressed, the client produced %d MiB; peak heap growth %d KiB",
				elapsed, handlerRead.Load()>>10, produced.Load()>>20, (int64(peak.Load())-int64(base))>>10)
		})
	}
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
