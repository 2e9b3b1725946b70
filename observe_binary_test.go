package syncgo_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// TestBinaryAdminListener runs the built `syncgo serve` with an admin
// listener, JSON logs and CORS: the probes answer on both listeners,
// metrics and pprof only on the admin one; a client's push and pull over
// the main listener move the admin listener's counters; a preflight is
// answered; the JSON access log names the actor and never the token.
func TestBinaryAdminListener(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the syncgo binary")
	}
	t.Parallel()
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "syncgo.db"), "-log-format", "json", "-log-level", "info",
		"-cors-origins", "https://app.example.com", "-cors-max-age", "5m")
	main := p.URL
	var admin string
	eventually(t, "the admin listener's address", func() bool {
		_, rest, ok := strings.Cut(p.Stdout.String(), "syncgo admin listening on ")
		admin, _, _ = strings.Cut(rest, " ")
		return ok && strings.HasPrefix(admin, "http://")
	})

	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, base := range []string{main, admin} {
		for _, p := range []string{"/healthz", "/readyz"} {
			if s := status(base + p); s != 200 {
				t.Errorf("%s%s = %d, want 200", base, p, s)
			}
		}
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/metrics"} {
		if s := status(admin + p); s != 200 {
			t.Errorf("admin %s = %d, want 200", p, s)
		}
		if s := status(main + p); s != http.StatusNotFound {
			t.Errorf("main %s = %d, want 404", p, s)
		}
	}

	scrape := func() scraped {
		t.Helper()
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return scraped(b)
	}
	if v := scrape().must(t, "syncgo_push_commits_total", "status", "applied"); v != 0 {
		t.Fatalf("applied pushes before any = %v", v)
	}
	sc := mpDemoSchema(t)
	c, err := sspclient.New(main, "alice", sc, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	id, err := c.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "one", "done": false, "notes": nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.Outcome(id); o.Status != wire.PushApplied {
		t.Fatalf("push: %s", statusOf(o))
	}
	// A request is counted when its handler returns, which can be just
	// after the client read the whole response: the count may lag it.
	m := scrape()
	for deadline := time.Now().Add(5 * time.Second); m.must(t, "syncgo_http_requests_total", "route", "sync", "code", "200") < 2 &&
		time.Now().Before(deadline); m = scrape() {
		time.Sleep(10 * time.Millisecond)
	}
	if v := m.must(t, "syncgo_push_commits_total", "status", "applied"); v != 1 {
		t.Errorf("applied pushes = %v, want 1", v)
	}
	if v := m.must(t, "syncgo_http_requests_total", "route", "sync", "code", "200"); v < 2 {
		t.Errorf("sync requests = %v, want at least 2", v)
	}
	if v := m.must(t, "process_resident_memory_bytes"); v <= 0 {
		t.Errorf("process collector: resident memory %v", v)
	}

	// CORS preflight on the main listener.
	req, _ := http.NewRequest(http.MethodOptions, main+"/sync", nil)
	req.Header.Set("Origin", "https://app.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		resp.Header.Get("Access-Control-Max-Age") != "300" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}

	// Stop, then read the logs whole.
	p.Stop()
	if !p.Cmd.ProcessState.Success() {
		t.Errorf("serve exited with %v", p.Cmd.ProcessState)
	}
	logs := p.Stderr
	var access int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q is not JSON", line)
		}
		if l["msg"] == "http request" && l["route"] == "sync" {
			access++
			if l["actor"] != "alice" || l["status"] != float64(200) {
				t.Errorf("access line %s: want actor alice, status 200", line)
			}
		}
	}
	if access < 2 {
		t.Errorf("%d access lines for /sync, want at least 2", access)
	}
	if strings.Contains(logs.String(), "Bearer alice") {
		t.Errorf("the logs carry an Authorization value")
	}
}
