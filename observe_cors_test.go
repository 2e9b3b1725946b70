package syncgo_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
)

// corsConfig allows one origin and a wildcard family, with credentials.
func corsConfig() *syncgo.CORSConfig {
	return &syncgo.CORSConfig{
		AllowedOrigins:   []string{"https://app.example.com", "https://*.preview.example.com"},
		MaxAge:           10 * time.Minute,
		AllowCredentials: true,
	}
}

// preflight sends a browser's preflight for method on path.
func preflight(t *testing.T, url, origin, method, headers string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodOptions, url, nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", method)
	if headers != "" {
		req.Header.Set("Access-Control-Request-Headers", headers)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// CORS preflights are answered on every route with the configured
// headers for a listed origin and a wildcard match; an unlisted origin is
// refused with 403 and no Access-Control-Allow-Origin; an actual request
// from a listed origin carries the CORS headers, one from an unlisted
// origin none.
func TestCORSPreflight(t *testing.T) {
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) { c.CORS = corsConfig() })
	for _, tc := range []struct{ path, method, headers string }{
		{"/sync", "POST", "authorization,content-encoding,content-type"},
		{"/segments/abc", "GET", "authorization,if-none-match,x-syncular-scopes"},
		{"/realtime?clientId=c1", "GET", "authorization"},
		{"/operations", "POST", "authorization,content-type"},
	} {
		for _, origin := range []string{"https://app.example.com", "https://pr-7.preview.example.com"} {
			resp := preflight(t, e.url+tc.path, origin, tc.method, tc.headers)
			h := resp.Header
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("preflight %s from %s: status %d, want 204", tc.path, origin, resp.StatusCode)
			}
			for k, want := range map[string]string{
				"Access-Control-Allow-Origin":      origin,
				"Access-Control-Allow-Methods":     tc.method,
				"Access-Control-Allow-Headers":     tc.headers,
				"Access-Control-Allow-Credentials": "true",
				"Access-Control-Max-Age":           "600",
			} {
				if got := h.Get(k); got != want {
					t.Errorf("preflight %s from %s: %s = %q, want %q", tc.path, origin, k, got, want)
				}
			}
			if !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
				t.Errorf("preflight %s: Vary %q lacks Origin", tc.path, h.Values("Vary"))
			}
		}
		for _, origin := range []string{"https://evil.example", "https://app.example.com.evil.example", "http://app.example.com"} {
			resp := preflight(t, e.url+tc.path, origin, tc.method, tc.headers)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("preflight %s from unlisted %s: %d, ACAO %q; want 403 and none", tc.path, origin,
					resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
			}
		}
	}
	// A header that is not allowed is not granted.
	resp := preflight(t, e.url+"/sync", "https://app.example.com", "POST", "x-custom")
	if resp.Header.Get("Access-Control-Allow-Headers") != "" || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight with an unlisted header granted it: %v", resp.Header)
	}

	// Actual requests.
	for origin, want := range map[string]string{"https://app.example.com": "https://app.example.com", "https://evil.example": ""} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/sync", strings.NewReader("x"))
		req.Header.Set("Origin", origin)
		req.Header.Set("Content-Type", syncgo.ProtocolContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != want {
			t.Errorf("POST /sync from %s: ACAO %q, want %q", origin, got, want)
		}
		if want != "" && !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
			t.Errorf("POST /sync from %s: Expose-Headers %q lacks Retry-After", origin, resp.Header.Get("Access-Control-Expose-Headers"))
		}
	}
	// A client with a listed origin syncs through the CORS layer.
	c := e.client("alice", sspclient.Options{})
	mustSubscribe(t, c, "s", "p1")
	mustUpsert(t, c, taskRow("t1", "p1", "one"))
	syncQuiet(t, c)
}

// A configuration a browser would refuse, or that is malformed, fails New.
func TestCORSConfigRefused(t *testing.T) {
	for name, cfg := range map[string]*syncgo.CORSConfig{
		"no origins":             {},
		"wildcard + credentials": {AllowedOrigins: []string{"*"}, AllowCredentials: true},
		"two wildcards":          {AllowedOrigins: []string{"https://*.*.example.com"}},
		"no scheme":              {AllowedOrigins: []string{"app.example.com"}},
	} {
		_, err := syncgo.New(syncgo.Config{Store: openSQLite(t), Schema: e2eSchema(t, 1), Authenticate: bearerAuth,
			ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil },
			CORS:          cfg})
		if err == nil || !strings.Contains(err.Error(), "CORS") {
			t.Errorf("%s: New = %v, want a CORS error", name, err)
		}
	}
}

// upgrade sends a WebSocket upgrade of /realtime with an Origin (none
// when empty) and header pairs, and returns the status and the error code
// of a refusal.
func upgrade(t *testing.T, base, origin string, header ...string) (int, string) {
	t.Helper()
	return upgradeAt(t, base+"/realtime?clientId=c-origin", origin, header...)
}

// upgradeAt is upgrade on any socket route.
func upgradeAt(t *testing.T, url, origin string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	code := ""
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		if pe, err := syncerr.ParseJSON(b); err == nil {
			code = pe.Code
		}
	}
	return resp.StatusCode, code
}

// The /realtime (and /operations/realtime) upgrade checks Origin: with CORS configured, a listed (or
// wildcard-matched) origin and a request without Origin are upgraded, a
// foreign one is refused with 403 sync.forbidden; without CORS, only the
// server's own origin (and no Origin) is upgraded.
func TestRealtimeOriginCheck(t *testing.T) {
	withCORS := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) { c.CORS = corsConfig() })
	for origin, want := range map[string]int{
		"":                                 http.StatusSwitchingProtocols,
		"https://app.example.com":          http.StatusSwitchingProtocols,
		"https://pr-7.preview.example.com": http.StatusSwitchingProtocols,
		"https://evil.example":             http.StatusForbidden,
		withCORS.url:                       http.StatusForbidden,
	} {
		status, code := upgrade(t, withCORS.url, origin)
		if status != want || (want == http.StatusForbidden && code != syncerr.CodeForbidden) {
			t.Errorf("with CORS, Origin %q: %d %s, want %d", origin, status, code, want)
		}
	}
	// The watch sockets of remote operations are guarded the same way.
	for origin, want := range map[string]int{
		"":                        http.StatusSwitchingProtocols,
		"https://app.example.com": http.StatusSwitchingProtocols,
		"https://evil.example":    http.StatusForbidden,
	} {
		status, code := upgradeAt(t, withCORS.url+"/operations/realtime", origin)
		if status != want || (want == http.StatusForbidden && code != syncerr.CodeForbidden) {
			t.Errorf("with CORS, /operations/realtime, Origin %q: %d %s, want %d", origin, status, code, want)
		}
	}
	plain := newE2EEnv(t, e2eDrivers[0])
	for origin, want := range map[string]int{
		"":                        http.StatusSwitchingProtocols,
		plain.url:                 http.StatusSwitchingProtocols,
		"https://evil.example":    http.StatusForbidden,
		"https://app.example.com": http.StatusForbidden,
	} {
		status, code := upgrade(t, plain.url, origin)
		if status != want || (want == http.StatusForbidden && code != syncerr.CodeForbidden) {
			t.Errorf("without CORS, Origin %q: %d %s, want %d", origin, status, code, want)
		}
	}
	// Behind a proxy that rewrote Host: the forwarded host is the origin.
	if status, _ := upgrade(t, plain.url, "https://sync.example.com", "X-Forwarded-Host", "sync.example.com"); status != http.StatusSwitchingProtocols {
		t.Errorf("without CORS, Origin matching X-Forwarded-Host: %d, want 101", status)
	}
	if status, _ := upgrade(t, plain.url, "https://evil.example", "X-Forwarded-Host", "sync.example.com"); status != http.StatusForbidden {
		t.Errorf("without CORS, Origin not matching X-Forwarded-Host: %d, want 403", status)
	}
}
