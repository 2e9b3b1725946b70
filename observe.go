package syncgo

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncgo/syncgo/wire"
)

// route names the protocol route a request went to, for the access log
// and the request metrics: a fixed, small set of label values.
type route uint8

const (
	routeSync route = iota
	routeSegments
	routeRealtime
	routeOperations
	routeCommits
	routePreflight
	routeOther
	numRoutes
)

func (r route) String() string {
	switch r {
	case routeSync:
		return "sync"
	case routeSegments:
		return "segments"
	case routeRealtime:
		return "realtime"
	case routeOperations:
		return "operations"
	case routeCommits:
		return "commits"
	case routePreflight:
		return "preflight"
	}
	return "other"
}

// classify finds a request's route from its method and path (relative to
// the handler's mount point), without allocating.
func classify(r *http.Request) route {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "":
		return routePreflight
	case p == "/sync":
		return routeSync
	case p == "/realtime":
		return routeRealtime
	case strings.HasPrefix(p, "/segments/"):
		return routeSegments
	case p == "/operations" || p == "/operations/realtime":
		return routeOperations
	case p == "/commits":
		return routeCommits
	}
	return routeOther
}

// syncOp is what a /sync request (or a segment download) did, for the
// latency histograms.
type syncOp uint8

const (
	opNone syncOp = iota
	opPush
	opPull
	opPushPull
	opBootstrap
	opSegment
	opOperation
	numOps
)

func (o syncOp) String() string {
	switch o {
	case opPush:
		return "push"
	case opPull:
		return "pull"
	case opPushPull:
		return "push_pull"
	case opBootstrap:
		return "bootstrap"
	case opSegment:
		return "segment"
	case opOperation:
		return "operation"
	}
	return "none"
}

// requestOp classifies a decoded request: bootstrap when a subscription
// starts or resumes a bootstrap, otherwise by its push and pull parts.
func requestOp(req *wire.Request) syncOp {
	if req.Pull != nil {
		for _, sub := range req.Subscriptions {
			if sub.BootstrapState != nil || sub.Cursor < 0 {
				return opBootstrap
			}
		}
		if len(req.Commits) > 0 {
			return opPushPull
		}
		return opPull
	}
	if len(req.Commits) > 0 {
		return opPush
	}
	return opNone
}

// observer is the middleware of the access log and the request metrics.
// It is installed only when one of them is configured.
type observer struct {
	next    http.Handler
	metrics *metrics
	log     *slog.Logger
	// tracer opens a span per request (trace.go); nil: no tracing.
	tracer *requestTracer
	// writers recycles the observedWriters: nothing holds one after its
	// request (a hijacked connection does not refer to it).
	writers sync.Pool
}

func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rt := classify(r)
	ow, _ := o.writers.Get().(*observedWriter)
	if ow == nil {
		ow = &observedWriter{}
	}
	defer func() {
		*ow = observedWriter{}
		o.writers.Put(ow)
	}()
	ow.ResponseWriter = w
	body := r.Body
	if body != nil && body != http.NoBody {
		ow.body.r = body
		r.Body = &ow.body
	}
	var span trace.Span
	hr := r // the request handed on: with the span in its context
	if o.tracer != nil {
		hr, span = o.tracer.start(r, rt)
	}
	o.next.ServeHTTP(ow, hr)
	r.Body = body
	d := time.Since(start)
	switch {
	case ow.op != opNone:
	case rt == routeSegments:
		ow.op = opSegment
	case rt == routeOperations && r.Method == http.MethodPost:
		ow.op = opOperation
	}
	status := ow.status
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing
	}
	if span != nil {
		o.tracer.end(span, ow, status)
	}
	if o.metrics != nil {
		o.metrics.request(rt, ow.op, status, d, ow.body.n, ow.written)
	}
	if o.log != nil {
		attrs := [...]slog.Attr{
			slog.String("method", r.Method),
			slog.String("route", rt.String()),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", d),
			slog.String("actor", ow.actor),
			slog.Int64("bytes_in", ow.body.n),
			slog.Int64("bytes_out", ow.written),
			slog.String("op", ow.op.String()),
			slog.String("code", ow.code),
			slog.String("remote", r.RemoteAddr),
			{},
		}
		n := len(attrs) - 1
		if span != nil && span.SpanContext().IsValid() {
			attrs[n] = slog.String("trace_id", span.SpanContext().TraceID().String())
			n++
		}
		o.log.LogAttrs(hr.Context(), slog.LevelInfo, "http request", attrs[:n]...)
	}
}

// observedWriter records what a handler answered. The handlers note the
// authenticated actor, the request's operation and the error code on it
// (noteActor, noteOp, noteCode). It never records a header value or a
// byte of a body: an access log line holds no token and no row.
type observedWriter struct {
	http.ResponseWriter
	status  int
	written int64
	actor   string
	code    string
	op      syncOp
	body    countingBody
}

func (w *observedWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *observedWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes).
func (w *observedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *observedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker for the WebSocket upgrade, which then
// answers 101 on the connection itself.
func (w *observedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// countingBody counts the request body bytes a handler read.
type countingBody struct {
	r io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error { return b.r.Close() }

// noteActor records the authenticated actor of a request for its access
// log line.
func noteActor(w http.ResponseWriter, actor string) {
	if ow, ok := w.(*observedWriter); ok {
		ow.actor = actor
	}
}

// noteOp records what a request did, for the latency histograms.
func noteOp(w http.ResponseWriter, op syncOp) {
	if ow, ok := w.(*observedWriter); ok {
		ow.op = op
	}
}

// noteUpgradeFailed records a WebSocket upgrade that the upgrader refused
// with err on the hijacked connection: the status it answered (400 for a
// malformed handshake, 405 for another method, 426 for another WebSocket
// version, 505 for HTTP/1.0), 500 for any other failure.
func noteUpgradeFailed(w http.ResponseWriter, err error) {
	ow, ok := w.(*observedWriter)
	if !ok {
		return
	}
	ow.status = http.StatusInternalServerError
	if rej, ok := errors.AsType[*ws.ConnectionRejectedError](err); ok {
		ow.status = rej.StatusCode()
	}
}

// noteCode records the error code a request was answered with.
func noteCode(w http.ResponseWriter, code string) {
	if ow, ok := w.(*observedWriter); ok {
		ow.code = code
	}
}
