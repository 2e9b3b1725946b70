package syncgo_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/syncgo/syncgo/wire"
)

// errLostResponse is the transport failure a hookTransport injects.
var errLostResponse = errors.New("simulated network failure: response lost")

// exchange is one /sync round trip seen by a hookTransport: the decoded
// request and the response body as the server sent it.
type exchange struct {
	n    int // 1-based index among /sync requests
	req  *wire.Request
	body []byte
}

// hookTransport is an http.RoundTripper over real sockets that records
// every POST /sync and lets a test rewrite its outcome: onSync sees the
// exchange after the server answered in full and returns the body the
// client gets (nil keeps it), or an error to lose the response.
type hookTransport struct {
	base   http.RoundTripper
	onSync func(x *exchange) ([]byte, error)

	mu        sync.Mutex
	exchanges []*exchange
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/sync") {
		return h.base.RoundTrip(r)
	}
	reqBody, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.ContentLength = int64(len(reqBody))
	req, err := wire.DecodeRequest(reqBody, wire.DecoderOptions{})
	if err != nil {
		return nil, err
	}
	resp, err := h.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body) // the server finishes the round
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	x := &exchange{n: len(h.exchanges) + 1, req: req, body: body}
	h.exchanges = append(h.exchanges, x)
	h.mu.Unlock()
	if h.onSync != nil {
		out, err := h.onSync(x)
		if err != nil {
			return nil, err
		}
		if out != nil {
			body = out
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp, nil
}

// recorded returns the exchanges so far.
func (h *hookTransport) recorded() []*exchange {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*exchange(nil), h.exchanges...)
}

// client returns an http.Client over the transport.
func (h *hookTransport) client() *http.Client { return &http.Client{Transport: h} }

// newHookTransport returns a hookTransport over a fresh http.Transport.
func newHookTransport(onSync func(x *exchange) ([]byte, error)) *hookTransport {
	return &hookTransport{base: http.DefaultTransport.(*http.Transport).Clone(), onSync: onSync}
}

// frameSpan is the position of one frame in an encoded message.
type frameSpan struct {
	typ        wire.FrameType
	start, end int // header start, payload end
}

// frameSpans lists the frames of an (uncompressed) SSP2 message.
func frameSpans(b []byte) []frameSpan {
	var out []frameSpan
	for off := 8; off+5 <= len(b); {
		n := int(b[off+1]) | int(b[off+2])<<8 | int(b[off+3])<<16 | int(b[off+4])<<24
		out = append(out, frameSpan{typ: wire.FrameType(b[off]), start: off, end: off + 5 + n})
		off += 5 + n
	}
	return out
}
