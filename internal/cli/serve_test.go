package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs the development authentication: on an address other hosts
// can reach it refuses to start (before opening the database) unless -dev
// acknowledges it, and then still warns.
func TestServeRefusesNonLoopbackWithoutDev(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:0", ":0"} {
		db := filepath.Join(t.TempDir(), "syncgo.db")
		var stdout, stderr syncBuffer
		// A server that did start is stopped after a while: the test
		// then fails on its exit code instead of hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := Run(ctx, []string{"serve", "-listen", listen, "-db", db}, nil, &stdout, &stderr)
		cancel()
		if code != 1 || !strings.Contains(stderr.String(), "-dev") || !strings.Contains(stderr.String(), "loopback") || stdout.String() != "" {
			t.Errorf("serve -listen %s: exit %d, stdout %q, stderr %q; want exit 1, nothing served, a refusal naming -dev and loopback",
				listen, code, stdout.String(), stderr.String())
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("serve -listen %s refused but created the database (%v)", listen, err)
		}
	}

	// With -dev it serves, and warns loudly.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		code := Run(ctx, []string{"serve", "-dev", "-listen", "0.0.0.0:0", "-db", filepath.Join(t.TempDir(), "dev.db")}, nil, stdoutW, &stderr)
		stdoutW.Close()
		exit <- code
	}()
	lines := bufio.NewScanner(stdoutR)
	if !lines.Scan() {
		t.Fatalf("serve -dev printed nothing (exit %d): %s", <-exit, stderr.String())
	}
	go io.Copy(io.Discard, stdoutR)
	addr := strings.Fields(strings.TrimPrefix(lines.Text(), "syncgo listening on http://"))[0]
	_, port, _ := strings.Cut(addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(addr, ":")
	}
	resp, err := http.Post("http://127.0.0.1:"+port+"/sync", "application/x-ssp2", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType && resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("serve -dev on 0.0.0.0: POST /sync answered %d, want a protocol error", resp.StatusCode)
	}
	if !strings.Contains(stderr.String(), "NON-LOOPBACK") || !strings.Contains(stderr.String(), "DEVELOPMENT AUTHENTICATION") {
		t.Errorf("serve -dev on 0.0.0.0 did not warn: %s", stderr.String())
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Errorf("exit %d after cancel, want 0: %s", code, stderr.String())
	}
}

// The README's first command, serve without flags, keeps working on
// 127.0.0.1 without -dev.
func TestServeLoopbackNeedsNoDev(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		code := Run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "syncgo.db")}, nil, stdoutW, &stderr)
		stdoutW.Close()
		exit <- code
	}()
	lines := bufio.NewScanner(stdoutR)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "syncgo listening on http://127.0.0.1:") {
		t.Fatalf("serve on loopback: %q (exit %d): %s", lines.Text(), <-exit, stderr.String())
	}
	go io.Copy(io.Discard, stdoutR)
	if !strings.Contains(stderr.String(), "DEVELOPMENT AUTHENTICATION") || strings.Contains(stderr.String(), "NON-LOOPBACK") {
		t.Errorf("serve on loopback: stderr %q; want the development warning only", stderr.String())
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Errorf("exit %d after cancel, want 0: %s", code, stderr.String())
	}
}
