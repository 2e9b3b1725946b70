package syncgo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/syncerr"
)

// A client that stops reading its response is cut off after the write
// timeout of one chunk: the response (and its compressor) is not held
// forever (issue 15, finding 6).
func TestResponseWriteDeadline(t *testing.T) {
	s := &Server{cfg: Config{WriteTimeout: 200 * time.Millisecond}, codecs: newCodecPools()}
	done := make(chan error, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &httpResponder{s: s, w: w, rc: http.NewResponseController(w), encoding: ""}
		out, err := h.BeginStream(3)
		if err != nil {
			done <- err
			return
		}
		chunk := make([]byte, 32<<10)
		for range 64 << 20 / len(chunk) { // far more than the socket buffers hold
			if _, err = out.Write(chunk); err != nil {
				break
			}
		}
		if ferr := h.finish(); err == nil {
			err = ferr
		}
		done <- err
	}))
	defer hs.Close()
	nc, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("handler ended with %v, want a write deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a client that does not read held the response for 10 s")
	}
}

// The admission queue: a request waits for a slot while there is queue
// room, is refused when the queue is full or its wait runs out, and gets
// a slot that frees while it waits (issue 15, finding 5).
func TestAdmissionQueue(t *testing.T) {
	a := newAdmission(1, 1, 300*time.Millisecond, nil)
	rel1, err := a.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	var rel2 func()
	go func() {
		var err error
		rel2, err = a.acquire(context.Background())
		queued <- err
	}()
	for a.queued.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := a.acquire(context.Background()); syncerr.As(err) == nil || syncerr.As(err).Code != syncerr.CodeRateLimited {
		t.Fatalf("with the queue full: %v, want sync.rate_limited", err)
	}
	rel1()
	if err := <-queued; err != nil {
		t.Fatalf("the queued request did not get the freed slot: %v", err)
	}
	start := time.Now()
	if _, err := a.acquire(context.Background()); syncerr.As(err) == nil {
		t.Fatalf("a request whose wait ran out: %v, want a refusal", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("refused after %v, before its queue wait", waited)
	}
	rel2()
	rel3, err := a.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rel3()
}

// A drained burst of requests that filled at least half the slots asks
// the releaser to return the free memory; a smaller one does not.
func TestAdmissionFreesAfterBursts(t *testing.T) {
	var frees atomic.Int64
	rel := memfree.New(0, func() { frees.Add(1) })
	a := newAdmission(4, 0, time.Second, rel)
	burst := func(n int) {
		var rels []func()
		for range n {
			r, err := a.acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rels = append(rels, r)
		}
		for _, r := range rels {
			r()
		}
	}
	burst(1)
	burst(2)
	burst(1)
	burst(4)
	deadline := time.Now().Add(2 * time.Second)
	for frees.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n, r := frees.Load(), rel.Released(memfree.Requests); n != 2 || r != 2 {
		t.Errorf("%d releases (%d counted for requests) after bursts of 1, 2, 1 and 4 of 4 slots, want 2", n, r)
	}
}

// A burst of compressed responses leaves at most pooledEncoders encoders
// behind: after one collection the heap holds no more than that (a
// sync.Pool kept every one of them through the first collection, and an
// idle server runs none).
func TestCompressorPoolBounded(t *testing.T) {
	p := newCodecPools()
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	const burst = 200
	closers := make([]func() error, burst)
	for i := range closers {
		w, c := p.writer(io.Discard, "zstd")
		_, _ = w.Write([]byte(strings.Repeat("burst ", 1000)))
		closers[i] = c
	}
	for _, c := range closers {
		_ = c()
	}
	closers = nil
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(base.HeapInuse)
	t.Logf("%d encoders: heap after the burst and one collection grew by %d KiB", burst, grown>>10)
	if grown > 20<<20 {
		t.Fatalf("a burst of %d encoders left %d MiB in the heap", burst, grown>>20)
	}
}

// stutterReader returns (0, nil) before each byte, as io.Reader allows.
type stutterReader struct {
	b     []byte
	empty bool
}

func (r *stutterReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if r.empty = !r.empty; r.empty {
		return 0, nil
	}
	n := copy(p[:1], r.b)
	r.b = r.b[n:]
	return n, nil
}

// A body one byte over the cap is too large even when the reader under
// it returns an empty read (0, nil) where the extra byte is probed.
func TestLimitedReaderProbeSeesPastEmptyRead(t *testing.T) {
	for _, c := range []struct {
		body string
		want error
	}{{"abc", nil}, {"abcd", errBodyTooLarge}} {
		_, err := io.ReadAll(&limitedReader{r: &stutterReader{b: []byte(c.body)}, n: 3})
		if !errors.Is(err, c.want) && err != c.want {
			t.Errorf("%q under a cap of 3: %v, want %v", c.body, err, c.want)
		}
	}
}
