package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// faultConfig are the probabilities, per request, of each injected fault.
type faultConfig struct {
	dropRequest      float64 // the request never reaches the server
	dropResponse     float64 // the server handles it; the answer is lost
	truncateResponse float64 // the answer ends early, cleanly (io.EOF)
	severResponse    float64 // the connection is cut while the answer streams
	duplicate        float64 // the request is sent twice (a retransmitting proxy)
	truncateRequest  float64 // the body reaches the server cut short
}

var defaultFaults = faultConfig{dropRequest: 0.04, dropResponse: 0.05, truncateResponse: 0.05,
	severResponse: 0.04, duplicate: 0.05, truncateRequest: 0.03}

// faultTransport sits between a client and the server and injects faults
// into its requests, by a seeded random source. It is an
// http.RoundTripper over a real http.Transport: every request that is not
// dropped goes over a real socket.
type faultTransport struct {
	next    http.RoundTripper
	cfg     faultConfig
	enabled *atomic.Bool // shared: off for the final quiet sync

	mu     sync.Mutex // guards rng and counts
	rng    *mrand.Rand
	counts map[string]int
}

func newFaultTransport(next http.RoundTripper, cfg faultConfig, enabled *atomic.Bool, seed, stream uint64) *faultTransport {
	return &faultTransport{next: next, cfg: cfg, enabled: enabled,
		rng: mrand.New(mrand.NewPCG(seed, stream)), counts: map[string]int{}}
}

// errInjected marks a failure made by the transport.
var errInjected = errors.New("fault injected")

// pick draws the fault of one request, and a number for its parameters.
func (ft *faultTransport) pick() (string, uint64) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	x, n := ft.rng.Float64(), ft.rng.Uint64()
	c := ft.cfg
	for _, f := range []struct {
		name string
		p    float64
	}{{"drop-request", c.dropRequest}, {"drop-response", c.dropResponse}, {"truncate-response", c.truncateResponse},
		{"sever-response", c.severResponse}, {"duplicate", c.duplicate}, {"truncate-request", c.truncateRequest}} {
		if x < f.p {
			ft.counts[f.name]++
			return f.name, n
		}
		x -= f.p
	}
	return "", n
}

func (ft *faultTransport) Counts() map[string]int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	out := make(map[string]int, len(ft.counts))
	for k, v := range ft.counts {
		out[k] = v
	}
	return out
}

func (ft *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !ft.enabled.Load() {
		return ft.next.RoundTrip(req)
	}
	fault, n := ft.pick()
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	send := func(b []byte) (*http.Response, error) {
		r := req.Clone(req.Context())
		if req.Body != nil {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		}
		return ft.next.RoundTrip(r)
	}
	switch fault {
	case "drop-request":
		return nil, fmt.Errorf("%w: request dropped", errInjected)
	case "drop-response":
		resp, err := send(body)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: response dropped", errInjected)
	case "truncate-response", "sever-response":
		resp, err := send(body)
		if err != nil {
			return nil, err
		}
		resp.Body = &cutBody{rc: resp.Body, left: int64(n % 2048), sever: fault == "sever-response"}
		return resp, nil
	case "duplicate":
		if n%2 == 0 { // one after the other: a retransmission after a lost answer
			if resp, err := send(body); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			return send(body)
		}
		// both at once: the answer of the first to finish is returned
		type result struct {
			resp *http.Response
			err  error
		}
		ch := make(chan result, 2)
		for range 2 {
			go func() {
				resp, err := send(body)
				if err == nil {
					b, rerr := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					resp.Body, err = io.NopCloser(bytes.NewReader(b)), rerr
				}
				ch <- result{resp, err}
			}()
		}
		first := <-ch
		<-ch
		return first.resp, first.err
	case "truncate-request":
		if len(body) > 1 {
			body = body[:int(n%uint64(len(body)))]
		}
		return send(body)
	}
	return send(body)
}

// cutBody ends a response body after left bytes: cleanly (io.EOF, a
// proxy that closed early) or with a severed connection.
type cutBody struct {
	rc    io.ReadCloser
	left  int64
	sever bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.sever {
			return 0, fmt.Errorf("%w: connection severed", errInjected)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// quietPeriod is a sleep that ends early with ctx.
func quietPeriod(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
