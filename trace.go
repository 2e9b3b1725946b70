package syncgo

import (
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "github.com/syncgo/syncgo"

// requestTracer starts and ends the server span of each request that
// Handler answers (Config.TracerProvider).
type requestTracer struct {
	tracer trace.Tracer
	// prop reads a request's W3C traceparent and tracestate headers.
	prop propagation.TraceContext
}

func newRequestTracer(tp trace.TracerProvider) *requestTracer {
	if tp == nil {
		return nil
	}
	return &requestTracer{tracer: tp.Tracer(tracerName)}
}

// spanRoute is the route template of a span's name and http.route: a
// fixed, small set, never a segment id.
func spanRoute(rt route, path string) string {
	switch rt {
	case routeSync:
		return "/sync"
	case routeSegments:
		return "/segments/{segmentId}"
	case routeRealtime:
		return "/realtime"
	case routeOperations:
		if path == "/operations/realtime" {
			return path
		}
		return "/operations"
	case routeCommits:
		return "/commits"
	case routeOther:
		if strings.HasPrefix(path, "/blobs/") {
			if strings.HasSuffix(path, "/upload-grant") {
				return "/blobs/{blobId}/upload-grant"
			}
			return "/blobs/{blobId}"
		}
	}
	return ""
}

// methodOther is the http.request.method of a method HTTP does not
// define.
const methodOther = "_OTHER"

// spanMethod is a request method as a span names it: one of the methods
// HTTP defines (case-sensitive), or methodOther, so that the span names
// of requests form a small, fixed set whatever clients send.
func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return methodOther
}

// start opens the request's server span, a child of the caller's trace
// when the request carries a traceparent, and returns the request with
// the span in its context.
func (t *requestTracer) start(r *http.Request, rt route) (*http.Request, trace.Span) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	attrs := make([]attribute.KeyValue, 0, 12)
	name := spanMethod(r.Method)
	attrs = append(attrs, attribute.String("http.request.method", name), attribute.String("url.path", r.URL.Path))
	if name == methodOther {
		// The method is whatever the client sent: kept as an attribute,
		// never in the span's name (OpenTelemetry HTTP conventions).
		name = "HTTP"
		attrs = append(attrs, attribute.String("http.request.method_original", r.Method))
	}
	if tmpl := spanRoute(rt, r.URL.Path); tmpl != "" {
		name += " " + tmpl
		attrs = append(attrs, attribute.String("http.route", tmpl))
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, attribute.String("client.address", host))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// end records what the request was answered (status, operation, error
// code, actor, body sizes) and ends the span. A 5xx answer, or an error
// code with a 4xx or 5xx status, is an error of the span.
func (t *requestTracer) end(span trace.Span, ow *observedWriter, status int) {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.Int("http.response.status_code", status),
		attribute.Int64("http.request.body.size", ow.body.n), attribute.Int64("http.response.body.size", ow.written))
	if ow.op != opNone {
		attrs = append(attrs, attribute.String("syncgo.op", ow.op.String()))
	}
	if ow.code != "" {
		attrs = append(attrs, attribute.String("syncgo.error_code", ow.code))
	}
	if ow.actor != "" {
		attrs = append(attrs, attribute.String("enduser.id", ow.actor))
	}
	span.SetAttributes(attrs...)
	if status >= 500 || (status >= 400 && ow.code != "") {
		desc := ow.code
		if desc == "" {
			desc = http.StatusText(status)
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}
