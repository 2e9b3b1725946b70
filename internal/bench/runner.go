package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// runner is the state shared by a workload's virtual clients.
type runner struct {
	cfg    Config
	base   string
	hc     *http.Client
	tr     *http.Transport
	gen    *rowGen
	res    *Result
	errors atomic.Int64
	// bytesIn counts response body bytes as received (compressed).
	bytesIn atomic.Int64
	sockets socketCounters
	pid     int
	// rssDone: the workload reported "server RSS after" itself (at the
	// moment that figure means for it), so the runner does not.
	rssDone bool
	stop    func() // stops the child server, if one was started
	// pollers read the realtime sockets when set (startPollers); socket
	// i goes to pollers[i%len].
	pollers []*sockPoller
	// inflaters pools the flate readers that inflate the compressed
	// messages the pollers read (-ws-deflate).
	inflaters sync.Pool

	statusMu sync.Mutex
	st       *status
}

func newRunner(cfg Config) (*runner, error) {
	gen, err := newRowGen(cfg.Schema, cfg.Table, cfg.ValueBytes)
	if err != nil {
		return nil, err
	}
	conns := max(cfg.Clients, cfg.Sockets, 64) + 16
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // Accept-Encoding is set per request
	}
	r := &runner{cfg: cfg, base: strings.TrimRight(cfg.URL, "/"), tr: tr, gen: gen, pid: cfg.PID, stop: func() {}}
	r.hc = &http.Client{Transport: &countingTransport{rt: tr, n: &r.bytesIn}}
	params := map[string]any{"table": gen.table.Name(), "scope": cfg.Scope, "acceptEncoding": cfg.AcceptEncoding,
		"schema": cfg.SchemaPath, "authHeader": cfg.AuthHeader, "auth": cfg.Auth}
	r.res = &Result{Workload: cfg.Workload, URL: cfg.URL, Wire: cfg.Wire, Partition: cfg.Partition,
		Params: params, Started: time.Now()}
	return r, nil
}

func (r *runner) close() {
	for _, p := range r.pollers {
		p.stop()
	}
	r.stopStatus()
	r.tr.CloseIdleConnections()
	r.stop()
}

// startPollers makes the sockets connected from now on read by
// GOMAXPROCS sockPollers instead of a goroutine each (where the system
// has them).
func (r *runner) startPollers() {
	for range runtime.GOMAXPROCS(0) {
		p, err := newSockPoller(r.cfg.pollerArena)
		if err != nil {
			return
		}
		r.pollers = append(r.pollers, p)
	}
}

// pollerFor returns the poller of socket i, nil when sockets are read by
// goroutines.
func (r *runner) pollerFor(i int) *sockPoller {
	if len(r.pollers) == 0 {
		return nil
	}
	return r.pollers[i%len(r.pollers)]
}

// client returns a new sspclient for virtual client i: its own clientId,
// the configured auth header, the shared keep-alive transport.
func (r *runner) client(i int, opts sspclient.Options) (*sspclient.Client, error) {
	opts.WireVersion = r.cfg.Wire
	opts.AcceptEncoding = r.cfg.AcceptEncoding
	opts.HTTPClient = &http.Client{Transport: &headerTransport{rt: r.hc.Transport, h: r.cfg.authHeader(i)}}
	if opts.ClientID == "" {
		opts.ClientID = fmt.Sprintf("bench-%s-%d", randomHex(4), i)
	}
	return sspclient.New(r.base, "", r.cfg.Schema, opts)
}

// fail counts an error and returns it.
func (r *runner) fail(err error) error {
	r.errors.Add(1)
	return err
}

// status starts the live status line.
func (r *runner) status(line func(time.Duration) string) {
	if r.cfg.Quiet || r.cfg.Status == nil {
		return
	}
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	r.st.close()
	r.st = startStatus(r.cfg.Status, line)
}

func (r *runner) stopStatus() {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	r.st.close()
	r.st = nil
}

// headerTransport adds a virtual client's authentication header.
type headerTransport struct {
	rt http.RoundTripper
	h  http.Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		req = req.Clone(req.Context())
		for k, vs := range t.h {
			req.Header[k] = vs
		}
	}
	return t.rt.RoundTrip(req)
}

// countingTransport counts the response body bytes as they arrive.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: t.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// subscribe registers the workload's subscription on a client: the table
// inside a scope value.
func (r *runner) subscribe(c *sspclient.Client, scope string) error {
	return c.Subscribe("bench-"+r.gen.table.Name(), r.gen.table.Name(),
		map[string][]string{r.gen.variable: {scope}})
}

// waitCtx bounds a wait by the configured timeout.
func (r *runner) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.Timeout)
}

// upsertN queues n one-upsert commits of fresh rows in a scope value on
// c, or one commit of n upserts when batched.
func (r *runner) upsertN(c *sspclient.Client, prefix, scope string, from, n, rows int, batched bool) error {
	id := func(k int) int {
		if rows > 0 {
			return k % rows
		}
		return k
	}
	if batched {
		_, err := c.Mutate(func(tx *sspclient.Tx) error {
			for k := from; k < from+n; k++ {
				if err := tx.Upsert(r.gen.table.Name(), r.gen.row(prefix, id(k), scope)); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	}
	for k := from; k < from+n; k++ {
		if _, err := c.Upsert(r.gen.table.Name(), r.gen.row(prefix, id(k), scope)); err != nil {
			return err
		}
	}
	return nil
}

// checkPushed counts the pushed commits that were not applied (rejected
// or cached), and returns the applied ones and the highest commitSeq.
func (r *runner) checkPushed(res *sspclient.RoundResult) (applied int, lastSeq int64) {
	if res == nil {
		return 0, 0
	}
	for _, o := range res.Pushed {
		if o.Status != wire.PushApplied {
			r.errors.Add(1)
			continue
		}
		applied++
		lastSeq = max(lastSeq, o.CommitSeq)
	}
	return applied, lastSeq
}
