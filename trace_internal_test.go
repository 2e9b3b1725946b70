package syncgo

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The observer names each request's span by method and route template
// (never a segment id), puts it in the context the handler runs with,
// continues the request's traceparent, and marks an answer with an error
// code as an error.
func TestObserverSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var inHandler trace.SpanContext
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler = trace.SpanContextFromContext(r.Context())
		if strings.HasPrefix(r.URL.Path, "/segments/") {
			noteCode(w, "sync.segment_not_found")
			w.WriteHeader(http.StatusNotFound)
			return
		}
		noteActor(w, "alice")
		_, _ = w.Write([]byte("ok"))
	})
	o := &observer{next: next, tracer: newRequestTracer(tp)}
	for _, c := range []struct {
		method, path, name, route string
		fail                      bool
	}{
		{"POST", "/sync", "POST /sync", "/sync", false},
		{"GET", "/segments/seg-123", "GET /segments/{segmentId}", "/segments/{segmentId}", true},
		{"POST", "/operations", "POST /operations", "/operations", false},
		{"GET", "/operations/realtime", "GET /operations/realtime", "/operations/realtime", false},
		{"PUT", "/blobs/sha256:ab12", "PUT /blobs/{blobId}", "/blobs/{blobId}", false},
		{"POST", "/blobs/sha256:ab12/upload-grant", "POST /blobs/{blobId}/upload-grant", "/blobs/{blobId}/upload-grant", false},
		{"GET", "/elsewhere", "GET", "", false},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		o.ServeHTTP(httptest.NewRecorder(), req)
		spans := rec.Ended()
		s := spans[len(spans)-1]
		if s.Name() != c.name || s.SpanKind() != trace.SpanKindServer {
			t.Errorf("%s %s: span %q kind %v; want %q, server", c.method, c.path, s.Name(), s.SpanKind(), c.name)
		}
		if !s.SpanContext().Equal(inHandler) {
			t.Errorf("%s %s: the handler ran in span %v, not the request's %v", c.method, c.path, inHandler, s.SpanContext())
		}
		if s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s %s: parent %v; want the traceparent's", c.method, c.path, s.Parent())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["http.route"] != c.route {
			t.Errorf("%s %s: http.route %q; want %q", c.method, c.path, attrs["http.route"], c.route)
		}
		if c.fail {
			if s.Status().Code != codes.Error || attrs["syncgo.error_code"] != "sync.segment_not_found" || attrs["http.response.status_code"] != "404" {
				t.Errorf("%s %s: status %v, attributes %v; want an error with its code", c.method, c.path, s.Status(), attrs)
			}
		} else if s.Status().Code == codes.Error || attrs["enduser.id"] != "alice" || attrs["http.response.status_code"] != "200" {
			t.Errorf("%s %s: status %v, attributes %v", c.method, c.path, s.Status(), attrs)
		}
	}
}
