package syncgo_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// framingRecorder records how each /sync response was framed.
type framingRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []responseFraming
}

type responseFraming struct {
	contentLength int64
	chunked       bool
}

func (f *framingRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := f.base.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/sync") {
		f.mu.Lock()
		f.seen = append(f.seen, responseFraming{resp.ContentLength, len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"})
		f.mu.Unlock()
	}
	return resp, err
}

func (f *framingRecorder) last() responseFraming {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[len(f.seen)-1]
}

// A small sync response goes out whole, with a Content-Length (one write);
// one larger than the held size streams chunked, and arrives intact.
func TestE2EResponseFraming(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		rec := &framingRecorder{base: http.DefaultTransport.(*http.Transport).Clone()}
		opts := sspclient.Options{HTTPClient: &http.Client{Transport: rec}}
		w := e.client("alice", opts)
		mustSubscribe(t, w, "tasks-p1", "p1")
		syncQuiet(t, w)
		mustUpsert(t, w, taskRow("small", "p1", "t"))
		syncQuiet(t, w)
		if f := rec.last(); f.chunked || f.contentLength <= 0 {
			t.Fatalf("a small round's response: Content-Length %d, chunked %t; want a length and no chunking", f.contentLength, f.chunked)
		}
		r := e.client("bob", opts)
		mustSubscribe(t, r, "tasks-p1", "p1")
		syncQuiet(t, r) // bootstrapped: the rows below reach bob as commits
		// About 120 KiB of incompressible titles.
		for i := range 300 {
			b := make([]byte, 200)
			_, _ = rand.Read(b)
			mustUpsert(t, w, taskRow(fmt.Sprintf("r%03d", i), "p1", hex.EncodeToString(b)))
		}
		syncQuiet(t, w)
		syncQuiet(t, r)
		if got, want := clientRows(t, r, "tasks"), e.serverRows("tasks"); len(got) != 301 || len(got) != len(want) {
			t.Fatalf("bob has %d rows, the server %d; want 301", len(got), len(want))
		}
		chunked := false
		rec.mu.Lock()
		for _, f := range rec.seen {
			chunked = chunked || (f.chunked && f.contentLength < 0)
		}
		rec.mu.Unlock()
		if !chunked {
			t.Fatalf("no response was streamed chunked: %+v", rec.seen)
		}
	})
}
