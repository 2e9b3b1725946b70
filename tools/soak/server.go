package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one syncgo serve process the tool runs, on fixed ports so
// that a restart serves the same URL to its clients.
type instance struct {
	name      string
	bin       string
	dir       string
	config    string
	url       string // the protocol mount point
	adminURL  string
	logPath   string
	db        string
	secret    string
	port      int
	adminPort int
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	starts    int
	lastStart time.Time
}

// freePort returns a port nobody listens on at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newInstance writes the configuration of a process serving db.
func newInstance(name, bin, dir, db, schemaPath, secret string) (*instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	aport, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	in := &instance{
		name: name, bin: bin, dir: dir, config: filepath.Join(dir, "syncgo.yaml"),
		db: db, secret: secret, port: port, adminPort: aport,
		url:      fmt.Sprintf("http://127.0.0.1:%d", port),
		adminURL: fmt.Sprintf("http://127.0.0.1:%d", aport),
		logPath:  filepath.Join(dir, "server.log"),
	}
	return in, in.writeConfig(schemaPath)
}

// shutdownDelay is every process's shutdown_delay: a SIGTERM (a deploy,
// the run's end) drains for it, as a deploy behind a load balancer does
// (here the clients keep sending to the process while it drains).
const shutdownDelay = 2 * time.Second

// writeConfig writes the process's configuration with the schema file
// and the older schema files it still serves (schema_window); the
// process reads it at its next start.
func (in *instance) writeConfig(schemaPath string, window ...string) error {
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\ndb: %q\nschema: %q\nshutdown_delay: %s\nadmin:\n  listen: 127.0.0.1:%d\n",
		in.port, in.db, schemaPath, shutdownDelay, in.adminPort) + authYAML(in.secret)
	if len(window) > 0 {
		cfg += "schema_window:\n"
		for _, w := range window {
			cfg += fmt.Sprintf("  - %q\n", w)
		}
	}
	return os.WriteFile(in.config, []byte(cfg), 0o600)
}

// authYAML is the authentication and scope rules of a soak server:
// HS256 tokens whose claim tenant is the partition, projects the granted
// project ids, and role auditor grants every project.
func authYAML(secret string) string {
	return fmt.Sprintf(`auth:
  mode: jwt
  hs256_secret: %q
  partition_claim: tenant
scopes:
  project_id:
    - claim: projects
    - value: "*"
      when: { claim: role, equals: auditor }
`, secret)
}

// start runs the process and waits until /readyz answers 200.
func (in *instance) start(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n=== soak: start %d at %s ===\n", in.starts+1, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(in.bin, "serve", "-config", in.config)
	cmd.Dir = in.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	in.cmd, in.exited = cmd, exited
	in.starts++
	in.lastStart = time.Now()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			in.cmd = nil
			return fmt.Errorf("%s exited during start (see %s)", in.name, in.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if ready(in.url + "/readyz") {
			return nil
		}
	}
	return fmt.Errorf("%s not ready in 90 s (see %s)", in.name, in.logPath)
}

func ready(u string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kill sends sig and waits for the exit.
func (in *instance) kill(sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return
	}
	_ = in.cmd.Process.Signal(sig)
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.exited
	}
	in.cmd = nil
}

// sample is one measurement of a process.
type sample struct {
	At         time.Duration // since the run's start
	Instance   string
	Start      int // the process incarnation
	RSSKiB     int64
	Goroutines int64
	Uptime     time.Duration
}

func (in *instance) sample(since time.Time) (sample, bool) {
	in.mu.Lock()
	pid, start, started := 0, in.starts, in.lastStart
	if in.cmd != nil {
		pid = in.cmd.Process.Pid
	}
	in.mu.Unlock()
	if pid == 0 {
		return sample{}, false
	}
	s := sample{At: time.Since(since), Instance: in.name, Start: start, Uptime: time.Since(started), RSSKiB: -1, Goroutines: -1}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					s.RSSKiB, _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	if n, err := metricValue(in.adminURL+"/metrics", "go_goroutines"); err == nil {
		s.Goroutines = int64(n)
	}
	return s, true
}

// metricValue reads one unlabelled gauge of a Prometheus text exposition.
func metricValue(u, name string) (float64, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New(name + " not found")
}

// logProblems returns the lines of the server's log that show a panic, a
// fatal runtime error or a data race, with a little context.
func (in *instance) logProblems() ([]string, error) {
	b, err := os.ReadFile(in.logPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		l := strings.TrimSpace(line)
		if strings.Contains(strings.ToLower(l), "panic") || strings.HasPrefix(l, "fatal error:") ||
			strings.Contains(l, "DATA RACE") {
			out = append(out, l)
		}
	}
	return out, nil
}
