package syncgo

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo/wire"
)

// metrics are the counters updated on the request path. Every series is
// resolved once, in newMetrics: a request costs a few atomic adds and one
// histogram observation, with no label look-up and no allocation.
type metrics struct {
	requests   [numRoutes][numCodes]prometheus.Counter
	requestVec *prometheus.CounterVec // status codes outside knownCodes
	bytesIn    [numRoutes]prometheus.Counter
	bytesOut   [numRoutes]prometheus.Counter
	duration   [numOps]prometheus.Observer
	pushes     [wire.PushRejected + 1]prometheus.Counter
	conflicts  prometheus.Counter
}

// numCodes is the number of status codes whose series exist from the
// start (knownCodes).
const numCodes = 16

// knownCodes are the status codes a protocol route answers.
func knownCodes() [numCodes]int {
	return [numCodes]int{101, 200, 204, 304, 400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 500, 503}
}

// codeIndex is a status code's index in knownCodes, or -1.
func codeIndex(code int) int {
	switch code {
	case 101:
		return 0
	case 200:
		return 1
	case 204:
		return 2
	case 304:
		return 3
	case 400:
		return 4
	case 401:
		return 5
	case 403:
		return 6
	case 404:
		return 7
	case 405:
		return 8
	case 409:
		return 9
	case 410:
		return 10
	case 413:
		return 11
	case 415:
		return 12
	case 429:
		return 13
	case 500:
		return 14
	case 503:
		return 15
	}
	return -1
}

// durationBuckets span 0.5 ms to 30 s: a push on SQLite takes about a
// millisecond, a cold bootstrap of a large table seconds.
func durationBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// newMetrics registers the request-path metrics on reg. (The server's
// other counters are read at scrape time by serverCollector.)
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	m.requestVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncgo_http_requests_total",
		Help: "HTTP requests answered, by route (sync, segments, realtime, operations, preflight, other) and status code.",
	}, []string{"route", "code"})
	bytesIn := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncgo_http_request_bytes_total",
		Help: "Request body bytes read, as sent (compressed when the client compressed), by route.",
	}, []string{"route"})
	bytesOut := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncgo_http_response_bytes_total",
		Help: "Response body bytes written, as sent (after compression), by route.",
	}, []string{"route"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "syncgo_request_duration_seconds",
		Help:    "Time to answer a request, by operation: push, pull, push_pull, bootstrap (a /sync request), segment (a download), operation (POST /operations), none (refused before it was decoded).",
		Buckets: durationBuckets(),
	}, []string{"op"})
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncgo_push_commits_total",
		Help: "Pushed commits answered, over HTTP and realtime sockets, by result status (applied, cached, rejected).",
	}, []string{"status"})
	m.conflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "syncgo_push_conflicts_total",
		Help: "Pushed commits rejected with a conflict (a subset of syncgo_push_commits_total{status=\"rejected\"}).",
	})
	for rt := range numRoutes {
		name := rt.String()
		for i, c := range knownCodes() {
			m.requests[rt][i] = m.requestVec.WithLabelValues(name, strconv.Itoa(c))
		}
		m.bytesIn[rt] = bytesIn.WithLabelValues(name)
		m.bytesOut[rt] = bytesOut.WithLabelValues(name)
	}
	for op := range numOps {
		m.duration[op] = duration.WithLabelValues(op.String())
	}
	for _, st := range []wire.PushStatus{wire.PushApplied, wire.PushCached, wire.PushRejected} {
		m.pushes[st] = pushes.WithLabelValues(st.String())
	}
	for _, c := range []prometheus.Collector{m.requestVec, bytesIn, bytesOut, duration, pushes, m.conflicts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// request counts an answered request.
func (m *metrics) request(rt route, op syncOp, status int, d time.Duration, in, out int64) {
	if i := codeIndex(status); i >= 0 {
		m.requests[rt][i].Inc()
	} else {
		m.requestVec.WithLabelValues(rt.String(), strconv.Itoa(status)).Inc()
	}
	if in > 0 {
		m.bytesIn[rt].Add(float64(in))
	}
	if out > 0 {
		m.bytesOut[rt].Add(float64(out))
	}
	if rt == routeSync || rt == routeSegments || op == opOperation {
		m.duration[op].Observe(d.Seconds())
	}
}

// pushResult counts a PUSH_RESULT (engine.Config.OnPushResult).
func (m *metrics) pushResult(status wire.PushStatus, conflict bool) {
	if int(status) < len(m.pushes) && m.pushes[status] != nil {
		m.pushes[status].Inc()
	}
	if conflict {
		m.conflicts.Inc()
	}
}
