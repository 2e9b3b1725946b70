package syncgo_test

import (
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/syncgo/syncgo"
)

// A request method is any token a client sends: spans name only the
// methods HTTP defines, and every other one _OTHER (span name "HTTP",
// the method kept in http.request.method_original), as the OpenTelemetry
// HTTP conventions ask, so that a client inventing methods does not
// invent span names (which tracing backends index).
func TestSpanNamesBoundedUnderHostileMethods(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) { c.TracerProvider = tp })
	methods := []string{"FOO", "BAR-1", "SYNC", "get", "PROPFIND", "X"}
	for _, m := range methods {
		for _, path := range []string{"/sync", "/elsewhere", "/segments/s1"} {
			req, err := http.NewRequest(m, e.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	spans := rec.Ended()
	if len(spans) != len(methods)*3 {
		t.Fatalf("%d spans, want %d", len(spans), len(methods)*3)
	}
	names := map[string]bool{}
	for _, s := range spans {
		names[s.Name()] = true
		var method, original string
		for _, a := range s.Attributes() {
			switch a.Key {
			case "http.request.method":
				method = a.Value.AsString()
			case "http.request.method_original":
				original = a.Value.AsString()
			}
		}
		if method != "_OTHER" || original == "" {
			t.Errorf("span %q: http.request.method %q, original %q; want _OTHER and the method sent", s.Name(), method, original)
		}
	}
	for name := range names {
		switch name {
		case "HTTP", "HTTP /sync", "HTTP /segments/{segmentId}":
		default:
			t.Errorf("span name %q comes from the request", name)
		}
	}
}
