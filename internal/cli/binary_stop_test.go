package cli_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/binarytest"
)

// slowUpload opens a POST /sync on p whose body arrives one byte every
// 200 ms (never stalled), until the test ends: a connection that keeps
// the server's shutdown waiting.
func slowUpload(t *testing.T, p *binarytest.Process) {
	t.Helper()
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	head := "POST " + u.Path + "/sync HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer alice\r\n" +
		"Content-Type: " + syncgo.ProtocolContentType + "\r\nContent-Length: 100000\r\n\r\n"
	if _, err := c.Write([]byte(head + "x")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
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
}

// On SIGTERM the server waits up to 10 s for running requests, closes the
// sockets and exits 0 (docs/deployment.md): a connection still busy then
// (a slow client's upload, still being read after its answer) is cut, and
// the stop is still a clean one. It used to exit 1 with "context deadline
// exceeded", which a service manager records as a failure. While it
// waits, /readyz (on the admin listener, still up) answers 503: the main
// listener accepts no more connections. It used to answer 200 until the
// wait was over.
func TestBinarySIGTERMWithSlowRequestExitsZero(t *testing.T) {
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0",
		"-admin-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "slow.db"))
	var admin string
	eventually(t, "the admin listener's address", func() bool {
		_, rest, ok := strings.Cut(p.Stdout.String(), "syncgo admin listening on ")
		admin, _, _ = strings.Cut(rest, " ")
		return ok && strings.HasPrefix(admin, "http://")
	})
	slowUpload(t, p)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			t.Fatalf("admin /readyz while the stop waits: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("admin /readyz still %d 5 s after SIGTERM, with the main listener closed", resp.StatusCode)
			break
		}
		time.Sleep(50 * time.Millisecond)
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

// On SIGTERM an open realtime socket gets a going-away close frame (1001)
// and the process exits 0.
func TestBinarySIGTERMClosesSocketsGoingAway(t *testing.T) {
	bin := binarytest.Build(t)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0",
		"-db", filepath.Join(t.TempDir(), "sock.db"))
	d := ws.Dialer{Timeout: 10 * time.Second, Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
	conn, br, _, err := d.Dial(context.Background(), "ws"+strings.TrimPrefix(p.URL, "http")+"/realtime?clientId=c1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	expectHello(t, conn, br)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, _, err := wsutil.ReadServerData(struct {
			io.Reader
			io.Writer
		}{r, conn})
		if err == nil {
			continue // a heartbeat
		}
		var closed wsutil.ClosedError
		if !errors.As(err, &closed) || closed.Code != ws.StatusGoingAway {
			t.Fatalf("socket after SIGTERM: %v, want a close frame 1001", err)
		}
		break
	}
	select {
	case <-p.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("the process did not stop within 20 s of SIGTERM")
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}
