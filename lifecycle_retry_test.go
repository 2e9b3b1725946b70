package syncgo_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo"
)

// A Start that failed because Postgres was unreachable (a short outage
// while the host boots) may be called again: once Postgres answers, the
// second Start prepares the storage, the server serves and its commit
// listener runs, and Stop stops it. Start used to run its work once, so
// the server stayed not ready for the life of the process.
func TestStartRetriedAfterOutage(t *testing.T) {
	t.Parallel()
	st, proxy := proxiedPostgresStore(t, "syncgo_startretry", false)
	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.srv, e.hs = srv, httptest.NewServer(srv.Handler())
	e.url = e.hs.URL
	t.Cleanup(func() {
		_ = srv.Stop(context.Background())
		e.hs.Close()
	})
	probe := httptest.NewServer(srv.ReadyzHandler())
	t.Cleanup(probe.Close)
	ready := func() (int, string) { return readyz(t, probe.URL) }

	proxy.cut()
	ctx, cancel := context.WithTimeout(context.Background(), 2*rtWait)
	defer cancel()
	err = srv.Start(ctx)
	var re *syncgo.ReadinessError
	if !errors.As(err, &re) {
		t.Fatalf("Start while Postgres is unreachable: %v, want a *ReadinessError", err)
	}
	if status, body := ready(); status != http.StatusServiceUnavailable || !strings.Contains(body, `"phase":"storage_migration"`) {
		t.Fatalf("/readyz after the failed Start: %d %s", status, body)
	}

	proxy.restore()
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("Start again once Postgres answers: %v", err)
	}
	if !srv.Ready() {
		t.Fatal("the server is not ready after the second Start succeeded")
	}
	if status, body := ready(); status != http.StatusOK {
		t.Fatalf("/readyz after the second Start: %d %s", status, body)
	}
	eventually(t, "the commit listener connects", func() bool { return srv.RealtimeStats().ListenerConnects >= 1 })
	if seq := e.peer("alice", "w1").push("c1", rtTask{"t1", "p1", "after", ""}); seq < 1 {
		t.Fatalf("push after the second Start: commit %d", seq)
	}
	if err := srv.Start(ctx); err != nil { // a third call is a no-op
		t.Fatalf("Start after success: %v", err)
	}
	if n := srv.RealtimeStats().ListenerConnects; n != 1 {
		t.Fatalf("%d listener connects after three Starts, want 1 (services started once)", n)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Start(ctx); err == nil {
		t.Fatal("Start after Stop succeeded")
	}
}

// gatheredGauge is the value of the gauge of name whose label k is v in
// reg, and whether reg has that series.
func gatheredGauge(t *testing.T, reg *prometheus.Registry, name, k, v string) (float64, bool) {
	t.Helper()
	m := gatheredSeries(t, reg, name, k, v)
	return m.GetGauge().GetValue(), m != nil
}

// A listen connection that cannot reach Postgres (a wrong db_listen, a
// network cut of that connection only) leaves the server ready, since
// failing readiness could take every instance out at once, but says so:
// /readyz's body has "commitListener":"down" and the gauge
// syncgo_commit_listener_up{listener="realtime"} is 0, until the
// connection is back. Before, only a log line said it.
func TestListenerDownObservable(t *testing.T) {
	t.Parallel()
	st, proxy := proxiedPostgresStore(t, "syncgo_listendown", true)
	proxy.cut()
	reg := prometheus.NewRegistry()
	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	e.start(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve, RetentionInterval: -1, Metrics: reg})
	probe := httptest.NewServer(e.srv.ReadyzHandler())
	t.Cleanup(probe.Close)
	ready := func() (int, string) { return readyz(t, probe.URL) }
	up := func() (float64, bool) {
		return gatheredGauge(t, reg, "syncgo_commit_listener_up", "listener", "realtime")
	}

	wantListener := func(state, when string) {
		t.Helper()
		if status, body := ready(); status != http.StatusOK || !strings.Contains(body, `"commitListener":"`+state+`"`) {
			t.Fatalf("/readyz %s: %d %s, want 200 and \"commitListener\":%q", when, status, body, state)
		}
	}
	wantListener("down", "while the listen connection cannot connect")
	if v, ok := up(); !ok || v != 0 {
		t.Fatalf("syncgo_commit_listener_up{listener=realtime} = %v (present %v), want 0", v, ok)
	}

	proxy.restore()
	eventually(t, "the listen connection connects", func() bool {
		v, ok := up()
		return ok && v == 1
	})
	wantListener("listening", "once the listen connection is up")

	proxy.cut()
	eventually(t, "the lost listen connection is seen", func() bool {
		v, ok := up()
		return ok && v == 0
	})
	wantListener("down", "after the listen connection was cut")
}
