package cli_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/sspclient"
)

// collector is an OTLP/HTTP traces receiver: it decodes each export
// request and keeps its spans with their service name.
type collector struct {
	mu    sync.Mutex
	spans []exportedSpan
	paths []string
}

type exportedSpan struct {
	service string
	span    *tracepb.Span
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	for _, rs := range req.ResourceSpans {
		service := stringAttr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, exportedSpan{service: service, span: s})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// wait returns the first span that match accepts, waiting up to 15 s.
func (c *collector) wait(t *testing.T, what string, match func(*tracepb.Span) bool) exportedSpan {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c.mu.Lock()
		for _, s := range c.spans {
			if match(s.span) {
				c.mu.Unlock()
				return s
			}
		}
		n := len(c.spans)
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no exported span is %s (%d spans exported)", what, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func stringAttr(attrs []*commonpb.KeyValue, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

func intAttr(attrs []*commonpb.KeyValue, key string) int64 {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.GetIntValue()
		}
	}
	return -1
}

// traceparentTransport adds a W3C traceparent to every request.
type traceparentTransport struct{ value string }

func (tt traceparentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", tt.value)
	return http.DefaultTransport.RoundTrip(r)
}

// With tracing.endpoint set, `syncgo serve` exports a server span per
// request over OTLP/HTTP: a child of the request's traceparent, named by
// method and route, with the status, the operation and the actor, and
// spans of its push and pull under it; a
// refused request's span is an error carrying the error code, and the
// access log line names the trace.
func TestBinaryTracing(t *testing.T) {
	col := &collector{}
	hs := httptest.NewServer(col)
	defer hs.Close()
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{Env: []string{"SYNCGO_TRACING_ENDPOINT=" + hs.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}},
		"-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "trace.db"))

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c, err := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{
		HTTPClient: &http.Client{Transport: traceparentTransport{"00-" + traceID + "-" + parentID + "-01"}}})
	must(t, err)
	if _, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	s := col.wait(t, "a POST /sync in the caller's trace", func(s *tracepb.Span) bool {
		return s.Name == "POST /sync" && hex.EncodeToString(s.TraceId) == traceID
	})
	if hex.EncodeToString(s.span.ParentSpanId) != parentID || s.span.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("span parent %x kind %v; want the traceparent's %s, server", s.span.ParentSpanId, s.span.Kind, parentID)
	}
	if s.service != "syncgo" {
		t.Fatalf("service.name %q; want syncgo", s.service)
	}
	attrs := s.span.Attributes
	if intAttr(attrs, "http.response.status_code") != 200 || stringAttr(attrs, "http.route") != "/sync" ||
		stringAttr(attrs, "enduser.id") != "alice" || stringAttr(attrs, "syncgo.op") == "" || intAttr(attrs, "http.request.body.size") <= 0 {
		t.Fatalf("span attributes %v", attrs)
	}
	if s.span.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("a 200 answer's span is an error: %v", s.span.Status)
	}

	// The push and the pull of a request are spans under its span.
	for _, child := range []struct {
		name, attr string
	}{{"syncgo.push", "syncgo.commits"}, {"syncgo.pull", "syncgo.subscriptions"}} {
		cs := col.wait(t, "a "+child.name+" span", func(s *tracepb.Span) bool {
			return s.Name == child.name && hex.EncodeToString(s.TraceId) == traceID
		})
		col.wait(t, "the request span over "+child.name, func(s *tracepb.Span) bool {
			return s.Name == "POST /sync" && bytes.Equal(s.SpanId, cs.span.ParentSpanId)
		})
		if intAttr(cs.span.Attributes, child.attr) < 0 {
			t.Fatalf("%s attributes %v; want %s", child.name, cs.span.Attributes, child.attr)
		}
	}

	// A request without credentials: its own trace, an error span with
	// the code it was refused with.
	resp, err := http.Post(p.URL+"/sync", "application/vnd.syncular.ssp2", bytes.NewReader([]byte{0}))
	must(t, err)
	resp.Body.Close()
	refused := col.wait(t, "the refused request's", func(s *tracepb.Span) bool {
		return s.Name == "POST /sync" && intAttr(s.Attributes, "http.response.status_code") >= 400
	})
	if hex.EncodeToString(refused.span.TraceId) == traceID || len(refused.span.ParentSpanId) != 0 {
		t.Fatalf("the refused request's span is in trace %x under %x; want a trace of its own", refused.span.TraceId, refused.span.ParentSpanId)
	}
	if refused.span.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || stringAttr(refused.span.Attributes, "syncgo.error_code") == "" {
		t.Fatalf("refused span status %v, attributes %v; want an error with its code", refused.span.Status, refused.span.Attributes)
	}
	col.mu.Lock()
	paths := col.paths
	col.mu.Unlock()
	if paths[0] != "/v1/traces" {
		t.Fatalf("exported to %s; want /v1/traces", paths[0])
	}
	if !strings.Contains(p.Stderr.String(), "trace_id="+traceID) {
		t.Fatalf("no access log line names trace %s; stderr:\n%s", traceID, p.Stderr)
	}
}

// A collector that cannot be reached costs a warning in the process log,
// in its format: every line of a JSON log stays JSON.
func TestBinaryTracingCollectorDown(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	endpoint := down.URL
	down.Close() // nothing listens there any more
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{Env: []string{"SYNCGO_TRACING_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=100"}},
		"-listen", "127.0.0.1:0", "-log-format", "json", "-db", filepath.Join(t.TempDir(), "trace.db"))
	resp, err := http.Post(p.URL+"/sync", "application/vnd.syncular.ssp2", bytes.NewReader([]byte{0}))
	must(t, err)
	resp.Body.Close()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.Stderr.String(), "tracing: spans not exported") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the failed export; stderr:\n%s", p.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(p.Stderr.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("a line of the JSON log is not JSON: %q", line)
		}
	}
}
