package syncgo_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The embedding API misused as a host might: the lifecycle out of order,
// the handler behind common middleware.

// embedCfg is a minimal Config on st.
func embedCfg(t *testing.T, st store.Store) syncgo.Config {
	return syncgo.Config{Store: st, Schema: e2eSchema(t, 1), Authenticate: bearerAuth,
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		}}
}

// epochRequest is a client's first POST /sync body.
func epochRequest(t *testing.T) []byte {
	t.Helper()
	b, err := (&wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: "device-1", SchemaVersion: 1},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postSync sends the epoch request to h and returns the status and the
// error code of a JSON error body ("" otherwise).
func postSync(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest("POST", path, bytes.NewReader(epochRequest(t)))
	r.Header.Set("Content-Type", syncgo.ProtocolContentType)
	r.Header.Set("Authorization", "Bearer alice")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, embedErrorCode(w.Body.Bytes())
}

func embedErrorCode(b []byte) string {
	var e struct {
		Code  string `json:"code"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	if e.Code != "" {
		return e.Code
	}
	return e.Error.Code
}

// plainWriter hides every optional interface of the writer it wraps
// (Hijacker, Flusher, Unwrap), as some middleware does.
type plainWriter struct{ w http.ResponseWriter }

func (p plainWriter) Header() http.Header         { return p.w.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.w.WriteHeader(code) }

// TestEmbedBehindMiddleware mounts the handler under a prefix on a mux
// with other routes, behind http.TimeoutHandler and behind a writer that
// hides Hijacker and Flusher: POST /sync is served through each, and a
// WebSocket upgrade that cannot hijack the connection is answered with
// the catalog's sync.internal_error (JSON) and reported to OnError and
// the log, naming the cause, rather than a bare text 500 nobody sees.
func TestEmbedBehindMiddleware(t *testing.T) {
	for _, observed := range []bool{false, true} {
		t.Run(fmt.Sprintf("accessLog=%v", observed), func(t *testing.T) { embedBehindMiddleware(t, observed) })
	}
}

func embedBehindMiddleware(t *testing.T, observed bool) {
	st := openSQLite(t)
	var onErr []string
	var mu sync.Mutex
	cfg := embedCfg(t, st)
	if observed { // the access log's writer wraps the host's
		cfg.AccessLog = slog.New(slog.DiscardHandler)
	}
	cfg.OnError = func(err error, route string) {
		mu.Lock()
		defer mu.Unlock()
		onErr = append(onErr, route+": "+err.Error())
	}
	s, err := syncgo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(ctx) })
	mux := http.NewServeMux()
	mux.Handle("/api/sync/", http.StripPrefix("/api/sync", s.Handler()))
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hi") })
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(plainWriter{w}, r) })
	timeout := http.TimeoutHandler(mux, 5*time.Second, "timeout")
	dialer := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
	for _, tc := range []struct {
		name    string
		h       http.Handler
		hijacks bool
	}{{"mux", mux, true}, {"plain", plain, false}, {"timeout", timeout, false}} {
		hs := httptest.NewServer(tc.h)
		defer hs.Close()
		req, _ := http.NewRequest("POST", hs.URL+"/api/sync/sync", bytes.NewReader(epochRequest(t)))
		req.Header.Set("Content-Type", syncgo.ProtocolContentType)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != syncgo.ProtocolContentType {
			t.Errorf("%s: POST /sync %d %q %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if m, err := wire.DecodeMessage(body, wire.DecoderOptions{}); err != nil || m == nil {
			t.Errorf("%s: POST /sync body does not decode: %v", tc.name, err)
		}
		resp, err = http.Get(hs.URL + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hi" {
			t.Errorf("%s: the mux's other route answered %q", tc.name, b)
		}
		for _, route := range []string{"realtime", "operations/realtime"} {
			conn, _, _, err := dialer.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/api/sync/"+route+"?clientId=c-"+tc.name)
			if tc.hijacks {
				if err != nil {
					t.Errorf("%s: dial %s: %v", tc.name, route, err)
				} else {
					conn.Close()
				}
				continue
			}
			if err == nil {
				conn.Close()
				t.Fatalf("%s: dial %s through a writer that cannot hijack succeeded", tc.name, route)
			}
			r, _ := http.NewRequest("GET", hs.URL+"/api/sync/"+route+"?clientId=r-"+tc.name, nil)
			r.Header.Set("Authorization", "Bearer alice")
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Sec-WebSocket-Version", "13")
			r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.name, route, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 500 || resp.Header.Get("Content-Type") != "application/json" || embedErrorCode(b) != "sync.internal_error" {
				t.Errorf("%s: upgrade of %s that cannot hijack: %d %q %q; want 500 application/json sync.internal_error",
					tc.name, route, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(onErr) != 8 || !strings.Contains(strings.Join(onErr, "\n"), "Hijacker") {
		t.Errorf("OnError got %q; want the 8 refused upgrades (2 writers, 2 routes, dialed and requested), naming http.Hijacker", onErr)
	}
}

// settledGoroutines waits until the goroutine count is at most want, and
// returns the last count seen.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// TestEmbedStopBeforeStart: Stop before Start, twice, is no error; Start
// after it refuses with PhaseStopping, and the handler answers 503
// sync.schema_not_ready throughout.
func TestEmbedStopBeforeStart(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		ctx := context.Background()
		s, err := syncgo.New(embedCfg(t, st))
		if err != nil {
			t.Fatal(err)
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Fatalf("before Start: %d %q; want 503 sync.schema_not_ready", code, c)
		}
		for i := range 2 {
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("Stop %d before Start: %v", i, err)
			}
		}
		var re *syncgo.ReadinessError
		if err := s.Start(ctx); !errors.As(err, &re) || re.Phase != syncgo.PhaseStopping {
			t.Fatalf("Start after Stop: %v; want a ReadinessError in PhaseStopping", err)
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Fatalf("after Stop before Start: %d %q; want 503 sync.schema_not_ready", code, c)
		}
		if s.Ready() {
			t.Fatal("Ready after Stop")
		}
	})
}

// TestEmbedLifecycleMisuse: a Start with a cancelled ctx fails and may be
// retried; Start from two goroutines at once and a third Start succeed
// once; Stop with a /realtime and an /operations/realtime socket open
// closes both with going-away; Stop twice is
// no error; after Stop, Start refuses, Ready is false and a request (even
// once the host closed the store, as Stop's godoc tells it to) is
// answered 503 sync.schema_not_ready in phase stopping, never a 500, and
// an upgrade is refused before it; no goroutine is left.
func TestEmbedLifecycleMisuse(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		ctx := context.Background()
		cfg := embedCfg(t, st)
		var mu sync.Mutex
		var onErr []string
		cfg.OnError = func(err error, route string) {
			mu.Lock()
			defer mu.Unlock()
			onErr = append(onErr, route+": "+err.Error())
		}
		s, err := syncgo.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := runtime.NumGoroutine()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		var re *syncgo.ReadinessError
		if err := s.Start(cctx); !errors.As(err, &re) {
			t.Fatalf("Start with a cancelled ctx: %v; want a ReadinessError", err)
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Fatalf("after the failed Start: %d %q", code, c)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Start(ctx) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Start %d: %v", i, err)
			}
		}
		if err := s.Start(ctx); err != nil {
			t.Fatalf("third Start: %v", err)
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 200 {
			t.Fatalf("started: %d %q", code, c)
		}
		hs := httptest.NewServer(s.Handler())
		defer hs.Close()
		wsURL := "ws" + strings.TrimPrefix(hs.URL, "http")
		dialer := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
		conn, _, _, err := dialer.Dial(ctx, wsURL+"/realtime?clientId=c1")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		watch, _, _, err := dialer.Dial(ctx, wsURL+"/operations/realtime?clientId=w1")
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Close()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		for i := range 2 {
			if err := s.Stop(sctx); err != nil {
				t.Fatalf("Stop %d: %v", i, err)
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(conn); !bytes.Contains(got, []byte("server shutting down")) {
			t.Errorf("the socket open at Stop read %q; want a going-away close", got)
		}
		_ = watch.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(watch); !bytes.Contains(got, []byte("server shutting down")) {
			t.Errorf("the watch socket open at Stop read %q; want a going-away close", got)
		}
		if err := s.Start(ctx); !errors.As(err, &re) || re.Phase != syncgo.PhaseStopping {
			t.Fatalf("Start after Stop: %v; want PhaseStopping", err)
		}
		if s.Ready() {
			t.Error("Ready() after Stop")
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Errorf("after Stop: %d %q; want 503 sync.schema_not_ready", code, c)
		}
		if _, _, _, err := dialer.Dial(ctx, wsURL+"/realtime?clientId=c2"); err == nil || !strings.Contains(err.Error(), "503") {
			t.Errorf("upgrade after Stop: %v; want refused with 503", err)
		}
		_ = st.Close()
		if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Errorf("after Stop and the store's Close: %d %q; want 503 sync.schema_not_ready", code, c)
		}
		mu.Lock()
		if len(onErr) > 0 {
			t.Errorf("OnError after Stop: %q", onErr)
		}
		mu.Unlock()
		conn.Close()
		watch.Close()
		hs.Close()
		if n := settledGoroutines(before); n > before {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before Start, %d after Stop\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// TestEmbedConfigMisuse: New refuses a Config it cannot serve with an
// error naming the field, and never panics.
func TestEmbedConfigMisuse(t *testing.T) {
	st := openSQLite(t)
	for _, tc := range []struct {
		name  string
		tweak func(*syncgo.Config)
		want  string
	}{
		{"nil Store", func(c *syncgo.Config) { c.Store = nil }, "Config.Store"},
		{"nil Schema", func(c *syncgo.Config) { c.Schema = nil }, "Config.Schema"},
		{"nil Authenticate", func(c *syncgo.Config) { c.Authenticate = nil }, "Config.Authenticate"},
		{"nil ResolveScopes", func(c *syncgo.Config) { c.ResolveScopes = nil }, "Config.ResolveScopes"},
		{"nil SchemaWindow entry", func(c *syncgo.Config) { c.SchemaWindow = []*schema.Compiled{nil} }, "Config.SchemaWindow[0]"},
		{"nil second SchemaWindow entry", func(c *syncgo.Config) {
			c.Schema = e2eSchema(t, 3)
			c.SchemaWindow = []*schema.Compiled{e2eSchema(t, 2), nil}
		}, "Config.SchemaWindow[1]"},
		{"SchemaWindow not older", func(c *syncgo.Config) { c.SchemaWindow = []*schema.Compiled{e2eSchema(t, 2)} }, "schema window"},
		{"Leases without TTL", func(c *syncgo.Config) { c.Leases = &syncgo.LeaseConfig{} }, "Config.Leases.TTL"},
		{"empty CORS", func(c *syncgo.Config) { c.CORS = &syncgo.CORSConfig{} }, "CORS.AllowedOrigins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("New panicked: %v", r)
				}
			}()
			cfg := embedCfg(t, st)
			tc.tweak(&cfg)
			if _, err := syncgo.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestEmbedStartRacesStop: a Start racing a Stop either starts and is
// stopped, or starts nothing (PhaseStopping); either way the server is
// not ready afterwards and leaves no goroutine.
func TestEmbedStartRacesStop(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		ctx := context.Background()
		if s, err := syncgo.New(embedCfg(t, st)); err != nil || s.Start(ctx) != nil || s.Stop(ctx) != nil {
			t.Fatal("the first server did not start and stop")
		}
		before := runtime.NumGoroutine()
		started := 0
		for range 10 {
			s, err := syncgo.New(embedCfg(t, st))
			if err != nil {
				t.Fatal(err)
			}
			startErr := make(chan error, 1)
			go func() { startErr <- s.Start(ctx) }()
			if err := s.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			var re *syncgo.ReadinessError
			switch err := <-startErr; {
			case err == nil:
				started++
			case !errors.As(err, &re) || re.Phase != syncgo.PhaseStopping:
				t.Fatalf("Start racing Stop: %v", err)
			}
			if s.Ready() {
				t.Fatal("Ready after Start and Stop")
			}
			if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
				t.Fatalf("after Start and Stop: %d %q", code, c)
			}
		}
		t.Logf("%d of 10 Starts completed before Stop", started)
		if n := settledGoroutines(before); n > before {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// TestEmbedStopEdges: Drain then Stop; a request in flight when Stop is
// called finishes (200) and Stop does not wait for it; a store closed
// before Stop does not make Stop hang or panic, and requests are then
// refused 503; two Servers on one store start, serve and stop
// independently.
func TestEmbedStopEdges(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		ctx := context.Background()
		entered, release := make(chan struct{}, 1), make(chan struct{})
		cfg := embedCfg(t, st)
		cfg.Authenticate = func(r *http.Request) (syncgo.Auth, error) {
			if r.Header.Get("Authorization") == "Bearer slow" {
				entered <- struct{}{}
				<-release
			}
			return bearerAuth(r)
		}
		a, err := syncgo.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := syncgo.New(embedCfg(t, st))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*syncgo.Server{a, b} {
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if code, c := postSync(t, s.Handler(), "/sync"); code != 200 {
				t.Fatalf("two servers on one store: %d %q", code, c)
			}
		}
		a.Drain()
		if code, c := postSync(t, a.Handler(), "/sync"); code != 200 {
			t.Fatalf("after Drain (still serving): %d %q", code, c)
		}
		inFlight := make(chan int, 1)
		go func() {
			r := httptest.NewRequest("POST", "/sync", bytes.NewReader(epochRequest(t)))
			r.Header.Set("Content-Type", syncgo.ProtocolContentType)
			r.Header.Set("Authorization", "Bearer slow")
			w := httptest.NewRecorder()
			a.Handler().ServeHTTP(w, r)
			inFlight <- w.Code
		}()
		select {
		case <-entered:
		case code := <-inFlight:
			t.Fatalf("the slow request did not authenticate: %d", code)
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		t0 := time.Now()
		if err := a.Stop(sctx); err != nil {
			t.Fatalf("Stop with a request in flight: %v", err)
		}
		if el := time.Since(t0); el > 3*time.Second {
			t.Errorf("Stop took %v with a request in flight", el)
		}
		close(release)
		if code := <-inFlight; code != 200 {
			t.Errorf("the request in flight at Stop: %d; want 200", code)
		}
		if code, c := postSync(t, b.Handler(), "/sync"); code != 200 {
			t.Errorf("the other server after the first's Stop: %d %q", code, c)
		}
		// The store closed before Stop.
		_ = st.Close()
		t0 = time.Now()
		if err := b.Stop(sctx); err != nil {
			t.Errorf("Stop after the store's Close: %v", err)
		}
		if el := time.Since(t0); el > 3*time.Second {
			t.Errorf("Stop took %v after the store's Close", el)
		}
		if code, c := postSync(t, b.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
			t.Errorf("after the store's Close and Stop: %d %q", code, c)
		}
	})
}

// TestEmbedStartCancelledMidway: Starts whose ctx ends at various points
// of the storage preparation return soon after it ends, answer 503
// meanwhile, and leave a storage that a later Start prepares and serves.
func TestEmbedStartCancelledMidway(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		s, err := syncgo.New(embedCfg(t, st))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(context.Background())
		for _, after := range []time.Duration{time.Microsecond, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
			ctx, cancel := context.WithTimeout(context.Background(), after)
			t0 := time.Now()
			err := s.Start(ctx)
			cancel()
			if el := time.Since(t0); el > after+3*time.Second {
				t.Errorf("Start with a ctx of %v returned after %v", after, el)
			}
			if err == nil {
				break // it completed in time: the storage is prepared
			}
			var re *syncgo.ReadinessError
			if !errors.As(err, &re) {
				t.Fatalf("Start with a ctx of %v: %v; want a ReadinessError", after, err)
			}
			if code, c := postSync(t, s.Handler(), "/sync"); code != 503 || c != "sync.schema_not_ready" {
				t.Fatalf("after a cancelled Start: %d %q", code, c)
			}
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatalf("Start after cancelled ones: %v", err)
		}
		if code, c := postSync(t, s.Handler(), "/sync"); code != 200 {
			t.Fatalf("served after cancelled Starts: %d %q", code, c)
		}
	})
}

// TestEmbedMethodsOutsideLifecycle: the Server's operator methods called
// before Start and after Stop (with the store still open) answer or
// refuse, and never panic.
func TestEmbedMethodsOutsideLifecycle(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		st := d.open(t)
		ctx := context.Background()
		s, err := syncgo.New(embedCfg(t, st))
		if err != nil {
			t.Fatal(err)
		}
		call := func(when string) {
			t.Helper()
			for name, f := range map[string]func(){
				"CheckReady": func() {
					if s.CheckReady(ctx) == nil {
						t.Errorf("%s: CheckReady is nil", when)
					}
				},
				"Readyz": func() {
					w := httptest.NewRecorder()
					s.ReadyzHandler().ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
					if w.Code != 503 {
						t.Errorf("%s: /readyz %d", when, w.Code)
					}
				},
				"Healthz": func() {
					w := httptest.NewRecorder()
					s.HealthzHandler().ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
				},
				"CloseActor":      func() { s.CloseActor("tenant-1", "") },
				"RevokeActor":     func() { _ = s.RevokeActor(ctx, "tenant-1", "alice") },
				"RevokeLease":     func() { _ = s.RevokeLease(ctx, "tenant-1", "nope") },
				"RealtimeStats":   func() { s.RealtimeStats() },
				"Prune":           func() { _, _ = s.Prune(ctx, "tenant-1", syncgo.RetentionPolicy{}) },
				"SweepSegments":   func() { _, _ = s.SweepSegments(ctx) },
				"SweepBlobs":      func() { _, _ = s.SweepBlobs(ctx) },
				"ReactionBacklog": func() { _, _ = s.ReactionBacklog(ctx) },
				"ListReactions":   func() { _, _ = s.ListReactions(ctx, store.ReactionQuery{Partition: "tenant-1"}) },
				"RetryReaction":   func() { _, _ = s.RetryReaction(ctx, "tenant-1", "k") },
				"DropReaction":    func() { _, _ = s.DropReaction(ctx, "tenant-1", "k") },
				"ReactionsHandler": func() {
					w := httptest.NewRecorder()
					s.ReactionsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				},
				"SetSignedURLTTL": func() { s.SetSignedURLTTL(time.Minute) },
				"SetBlobPresign":  func() { s.SetBlobPresign(false) },
				"Drain":           func() { s.Drain() },
			} {
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s: %s panicked: %v", when, name, r)
						}
					}()
					f()
				}()
			}
		}
		call("before Start")
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		call("after Stop")
	})
}

// gzipWriter is a compressing middleware's writer in the common style: at
// the first WriteHeader or Write, a response that has no Content-Encoding
// yet is gzipped; one the handler encoded itself passes through.
type gzipWriter struct {
	http.ResponseWriter
	gz      *gzip.Writer
	decided bool
}

func (g *gzipWriter) WriteHeader(code int) {
	if !g.decided {
		g.decided = true
		if g.Header().Get("Content-Encoding") == "" {
			g.Header().Set("Content-Encoding", "gzip")
			g.Header().Del("Content-Length")
			g.gz = gzip.NewWriter(g.ResponseWriter)
		}
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	if !g.decided {
		g.WriteHeader(http.StatusOK)
	}
	if g.gz != nil {
		return g.gz.Write(b)
	}
	return g.ResponseWriter.Write(b)
}

func (g *gzipWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// TestEmbedBehindGzipMiddleware: behind a compressing middleware, a
// protocol answer and an error answer both reach a client (Go's, which
// asks for gzip and decodes it) intact, and a socket still opens.
func TestEmbedBehindGzipMiddleware(t *testing.T) {
	st := openSQLite(t)
	s, err := syncgo.New(embedCfg(t, st))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(ctx) })
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			s.Handler().ServeHTTP(w, r)
			return
		}
		g := &gzipWriter{ResponseWriter: w}
		s.Handler().ServeHTTP(g, r)
		if g.gz != nil {
			_ = g.gz.Close()
		}
	}))
	defer hs.Close()
	for _, token := range []string{"alice", ""} {
		req, _ := http.NewRequest("POST", hs.URL+"/sync", bytes.NewReader(epochRequest(t)))
		req.Header.Set("Content-Type", syncgo.ProtocolContentType)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("token %q: read: %v", token, err)
		}
		if token != "" {
			if m, err := wire.DecodeMessage(body, wire.DecoderOptions{}); resp.StatusCode != 200 || err != nil || m == nil {
				t.Errorf("POST /sync behind gzip: %d, decode: %v", resp.StatusCode, err)
			}
		} else if resp.StatusCode != 401 || embedErrorCode(body) != "sync.auth_required" {
			t.Errorf("refused POST /sync behind gzip: %d %q", resp.StatusCode, body)
		}
	}
	conn, _, _, err := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}, "Accept-Encoding": {"gzip"}})}.
		Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/realtime?clientId=gz")
	if err != nil {
		t.Fatalf("dial behind gzip: %v", err)
	}
	conn.Close()
}
