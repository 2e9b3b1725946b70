package syncgo

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
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
