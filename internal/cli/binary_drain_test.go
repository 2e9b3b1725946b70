package cli

import (
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
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
	select {
	case <-p.Exited():
	case <-time.After(delay + 15*time.Second):
		t.Fatal("the process did not stop after the delay")
	}
	if took := time.Since(signalled); took < delay {
		t.Fatalf("stopped %v after the signal, before the %v delay", took, delay)
	}
}

// On SIGTERM the server waits up to 10 s for running requests, closes the
// sockets and exits 0 (docs/deployment.md): a connection still busy then
// (a slow client's upload, still being read after its answer) is cut, and
// the stop is still a clean one. It used to exit 1 with "context deadline
// exceeded", which a service manager records as a failure.
func TestBinarySIGTERMWithSlowRequestExitsZero(t *testing.T) {
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "slow.db"))
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST " + u.Path + "/sync HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer alice\r\n" +
		"Content-Type: " + syncgo.ProtocolContentType + "\r\nContent-Length: 100000\r\n\r\n"
	if _, err := c.Write([]byte(head + "x")); err != nil {
		t.Fatal(err)
	}
	// One byte every 200 ms: the request stays in flight, never stalled.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the request is being read
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not stop within 30 s of SIGTERM")
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM with a slow request in flight, want 0; stderr:\n%s", code, p.Stderr)
	}
}
