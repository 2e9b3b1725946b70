package cli

import (
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
)

// With -shutdown-delay, a SIGTERM turns /readyz to 503 at once while the
// server still answers requests, and the process stops only after the
// delay: the window a load balancer needs to take the instance out.
func TestBinaryShutdownDelay(t *testing.T) {
	bin := binarytest.Build(t)
	const delay = 1500 * time.Millisecond
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "drain.db"), "-shutdown-delay", delay.String())
	closes := false // the last answer's Connection: close
	status := func(method, path string) int {
		t.Helper()
		req, err := http.NewRequest(method, p.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		closes = resp.Close
		return resp.StatusCode
	}
	if got := status("GET", "/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before the signal: %d", got)
	}
	signalled := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(delay / 2)
	for status("GET", "/readyz") != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still 200 well into the shutdown delay")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Still serving: an unauthenticated request gets its 401, not a
	// refused connection.
	if got := status("POST", "/sync"); got != http.StatusUnauthorized && got != http.StatusUnsupportedMediaType {
		t.Fatalf("POST /sync during the delay: %d", got)
	}
	// ... and closes the connection after the answer, so that the
	// client's next request does not race the stop's close of it.
	if !closes {
		t.Fatal("POST /sync during the delay kept its connection open (no Connection: close)")
	}
	select {
	case <-p.Exited():
	case <-time.After(delay + 15*time.Second):
		t.Fatal("the process did not stop after the delay")
	}
	if took := time.Since(signalled); took < delay {
		t.Fatalf("stopped %v after the signal, before the %v delay", took, delay)
	}
}
