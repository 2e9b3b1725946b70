package syncgo

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo/wire"
)

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkObserver measures the middleware alone around a handler that
// reads a 1 KiB body and writes 1 KiB: what the metrics (and the access
// log) add to every request.
func BenchmarkObserver(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1024)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		noteActor(w, "alice")
		noteOp(w, opPushPull)
		_, _ = w.Write(payload)
	})
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", inner},
		{"metrics", &observer{next: inner, metrics: m}},
		{"metrics+accesslog", &observer{next: inner, metrics: m, log: slog.New(slog.NewJSONHandler(io.Discard, nil))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPost, "/sync", nil)
			body := bytes.NewReader(payload)
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				body.Reset(payload)
				req.Body = io.NopCloser(body)
				tc.h.ServeHTTP(w, req)
			}
		})
	}
}

// The middleware counts what the handler read and wrote, and the status.
func TestObserverCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{metrics: m, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write(append(b, b...))
	})}
	rec := httptest.NewRecorder()
	o.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/segments/x", bytes.NewReader([]byte("abc"))))
	if rec.Code != http.StatusTeapot || rec.Body.String() != "abcabc" {
		t.Fatalf("response %d %q", rec.Code, rec.Body)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mt.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if c := mt.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
			if h := mt.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{
		"syncgo_http_requests_total,code=418,route=segments": 1,
		"syncgo_http_requests_total,code=200,route=segments": 0,
		"syncgo_http_request_bytes_total,route=segments":     3,
		"syncgo_http_response_bytes_total,route=segments":    6,
		"syncgo_request_duration_seconds,op=segment":         1,
		"syncgo_request_duration_seconds,op=push_pull":       0,
		"syncgo_push_commits_total,status=applied":           0,
		"syncgo_push_conflicts_total":                        0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
}

// Requests are classified by what they carry.
func TestRequestOp(t *testing.T) {
	pull := &wire.PullHeader{}
	commit := []*wire.PushCommit{{ClientCommitID: "c"}}
	for _, tc := range []struct {
		req  *wire.Request
		want syncOp
	}{
		{&wire.Request{}, opNone},
		{&wire.Request{Commits: commit}, opPush},
		{&wire.Request{Pull: pull, Subscriptions: []*wire.Subscription{{Cursor: 4}}}, opPull},
		{&wire.Request{Pull: pull, Commits: commit, Subscriptions: []*wire.Subscription{{Cursor: 4}}}, opPushPull},
		{&wire.Request{Pull: pull, Commits: commit, Subscriptions: []*wire.Subscription{{Cursor: 4}, {Cursor: -1}}}, opBootstrap},
	} {
		if got := requestOp(tc.req); got != tc.want {
			t.Errorf("requestOp(%+v) = %s, want %s", tc.req, got, tc.want)
		}
	}
}
