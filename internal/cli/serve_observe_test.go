package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// get returns a GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serve -admin-listen serves the probes on both listeners, and metrics
// and pprof on the admin listener only.
func TestServeAdminListener(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		code := Run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-log-format", "json",
			"-db", filepath.Join(t.TempDir(), "syncgo.db")}, nil, stdoutW, &stderr)
		stdoutW.Close()
		exit <- code
	}()
	lines := bufio.NewScanner(stdoutR)
	var main, admin string
	for lines.Scan() {
		l := lines.Text()
		if rest, ok := strings.CutPrefix(l, "syncgo listening on "); ok {
			main = strings.Fields(rest)[0]
		}
		if rest, ok := strings.CutPrefix(l, "syncgo admin listening on "); ok {
			admin = strings.Fields(rest)[0]
			break
		}
	}
	if main == "" || admin == "" {
		t.Fatalf("serve printed no main or admin address (exit %d): %s", <-exit, stderr.String())
	}
	go io.Copy(io.Discard, stdoutR)

	for _, base := range []string{main, admin} {
		if status, body := get(t, base+"/healthz"); status != 200 || !strings.Contains(body, `"ok"`) {
			t.Errorf("%s/healthz = %d %q", base, status, body)
		}
		if status, body := get(t, base+"/readyz"); status != 200 || !strings.Contains(body, `"ready"`) {
			t.Errorf("%s/readyz = %d %q", base, status, body)
		}
	}
	if status, body := get(t, admin+"/metrics"); status != 200 || !strings.Contains(body, "syncgo_ready 1") ||
		!strings.Contains(body, "go_goroutines") || !strings.Contains(body, "syncgo_http_requests_total") {
		t.Errorf("admin /metrics = %d, want the server's and the Go runtime's metrics:\n%.2000s", status, body)
	}
	if status, body := get(t, admin+"/debug/pprof/"); status != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("admin /debug/pprof/ = %d", status)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/metrics"} {
		if status, _ := get(t, main+path); status == 200 {
			t.Errorf("main listener serves %s", path)
		}
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Errorf("exit %d after cancel: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"http request"`) {
		t.Errorf("no JSON access log line on stderr: %s", stderr.String())
	}
}

// Bad logging settings are refused before anything starts, from a flag
// or from the environment.
func TestServeLogSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		env     [2]string
		setting string
	}{
		{args: []string{"-log-format", "xml"}, setting: "log.format"},
		{args: []string{"-log-level", "loud"}, setting: "log.level"},
		{env: [2]string{"SYNCGO_LOG_FORMAT", "yaml"}, setting: "log.format"},
	} {
		if tc.env[0] != "" {
			t.Setenv(tc.env[0], tc.env[1])
		}
		var stdout, stderr syncBuffer
		code := Run(context.Background(), append([]string{"serve", "-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "x.db")}, tc.args...),
			nil, &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), tc.setting) || stdout.String() != "" {
			t.Errorf("serve %v %v: exit %d, stderr %q; want exit 1 naming %s", tc.args, tc.env, code, stderr.String(), tc.setting)
		}
	}
}
