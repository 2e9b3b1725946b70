package cli_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/syncerr"
)

// The binary's rate limit and socket cap flags: an actor's request over
// its rate is refused with 429 sync.rate_limited and Retry-After (after
// authentication, before the body is even read), another actor is served;
// an actor's socket over its cap is refused with 429
// sync.websocket_connection_limit, accepted again once the first closes;
// the admin listener's metrics count both refusals.
func TestBinaryLimits(t *testing.T) {
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "limits.db"),
		"-rate-per-actor", "0.2", "-rate-per-actor-burst", "2", "-max-sockets-per-actor", "1")

	post := func(actor string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/sync", strings.NewReader("not a request"))
		req.Header.Set("Content-Type", syncgo.ProtocolContentType)
		req.Header.Set("Authorization", "Bearer "+actor)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code := ""
		if pe, err := syncerr.ParseJSON(b); err == nil {
			code = pe.Code
		}
		return resp.StatusCode, code, resp.Header.Get("Retry-After")
	}
	for i := range 2 {
		if st, code, _ := post("alice"); st != http.StatusBadRequest {
			t.Fatalf("request %d within the burst: %d %s, want the malformed body's 400", i, st, code)
		}
	}
	if st, code, ra := post("alice"); st != http.StatusTooManyRequests || code != syncerr.CodeRateLimited || (ra != "5" && ra != "4") {
		t.Fatalf("over the rate: %d %s Retry-After %q, want 429 %s Retry-After 5 (a token every 5 s)", st, code, ra, syncerr.CodeRateLimited)
	}
	if st, _, _ := post("bob"); st != http.StatusBadRequest {
		t.Fatalf("another actor: %d, want 400", st)
	}
	if st, _, _ := post(""); st != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d, want 401 (authentication comes first)", st)
	}

	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "/realtime?clientId="
	d := ws.Dialer{Timeout: 10 * time.Second, Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer carol"}})}
	conn, br, _, err := d.Dial(context.Background(), wsURL+"c1")
	if err != nil {
		t.Fatal(err)
	}
	expectHello(t, conn, br)
	refused := d
	status := 0
	refused.OnStatusError = func(st int, _ []byte, _ io.Reader) { status = st }
	if c2, _, _, err := refused.Dial(context.Background(), wsURL+"c2"); err == nil {
		c2.Close()
		t.Fatal("carol's second socket was accepted over the cap of 1")
	}
	if status != http.StatusTooManyRequests {
		t.Fatalf("carol's second socket: HTTP %d, want 429", status)
	}
	conn.Close()
	eventually(t, "a socket accepted after the first closed", func() bool {
		c, br, _, err := d.Dial(context.Background(), wsURL+"c2")
		if err != nil {
			return false
		}
		defer c.Close()
		expectHello(t, c, br)
		return true
	})

	var admin string
	eventually(t, "the admin listener's address", func() bool {
		_, rest, ok := strings.Cut(p.Stdout.String(), "syncgo admin listening on ")
		admin, _, _ = strings.Cut(rest, " ")
		return ok && strings.HasPrefix(admin, "http://")
	})
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	metric := func(series string) float64 {
		for l := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				return f
			}
		}
		t.Fatalf("metrics lack %s", series)
		return 0
	}
	if v := metric(`syncgo_admission_rate_limited_total{reason="actor_rate"}`); v != 1 {
		t.Errorf("actor_rate refusals %v, want 1", v)
	}
	if v := metric(`syncgo_realtime_sockets_refused_total{cap="actor"}`); v < 1 {
		t.Errorf("socket refusals by the actor cap %v, want at least 1", v)
	}
	if v := metric(`syncgo_realtime_sockets_refused_total{cap="total"}`); v != 0 {
		t.Errorf("socket refusals by the total cap %v, want 0 (no total cap)", v)
	}
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
