// Package binarytest builds cmd/syncgo and runs it as a process for
// end-to-end tests of the binary: one helper instead of a copy in each
// test package.
package binarytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Build builds cmd/syncgo into a temporary directory of the test.
func Build(tb testing.TB) string {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("the go tool is needed to build cmd/syncgo: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), "syncgo")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/syncgo/syncgo/cmd/syncgo").CombinedOutput()
	if err != nil {
		tb.Fatalf("go build cmd/syncgo: %v\n%s", err, out)
	}
	return bin
}

// Log collects a process's output, safe for a writer and readers.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Process is a running `syncgo serve`.
type Process struct {
	Cmd *exec.Cmd
	// URL is the base URL of the protocol routes, from the startup line.
	URL string
	// Line is the startup line ("syncgo listening on http://…", or
	// https:// when serving TLS).
	Line string
	// Stdout and Stderr are the process's output so far.
	Stdout, Stderr *Log
	exited         chan struct{}
}

// Options of Serve.
type Options struct {
	// Env is added to the process's environment.
	Env []string
	// Dir is the working directory; default the test's temp dir.
	Dir string
	// Name names the process in failure messages.
	Name string
}

// Serve starts `bin serve args…` and returns once it printed its
// startup line. The process is interrupted (then killed) at cleanup, and
// its stderr logged if the test failed.
func Serve(tb testing.TB, bin string, opts Options, args ...string) *Process {
	tb.Helper()
	p, err := Start(tb, bin, opts, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Start is Serve returning an error instead of failing the test: a
// process that exits before its startup line (a refused configuration)
// is an error carrying its stderr.
func Start(tb testing.TB, bin string, opts Options, args ...string) (*Process, error) {
	tb.Helper()
	if opts.Name == "" {
		opts.Name = "syncgo serve"
	}
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Dir = opts.Dir
	if cmd.Dir == "" {
		cmd.Dir = tb.TempDir()
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, Stdout: &Log{}, Stderr: &Log{}, exited: make(chan struct{})}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			_, _ = p.Stdout.Write(append(sc.Bytes(), '\n'))
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		close(lines)
		_, _ = io.Copy(p.Stdout, stdout)
		_ = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		p.Stop()
		if tb.Failed() {
			tb.Logf("%s (pid %d) stderr:\n%s", opts.Name, cmd.Process.Pid, p.Stderr)
		}
	})
	select {
	case line, ok := <-lines:
		if !ok {
			<-p.exited
			return nil, &ExitError{Name: opts.Name, State: cmd.ProcessState.String(), Stderr: p.Stderr.String()}
		}
		p.Line = line
	case <-time.After(90 * time.Second):
		p.Stop()
		return nil, errors.New(opts.Name + " printed no startup line in 90 s; stderr:\n" + p.Stderr.String())
	}
	_, rest, ok := strings.Cut(p.Line, "listening on ")
	url, _, _ := strings.Cut(rest, " ")
	if !ok || (!strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://")) {
		p.Stop()
		return nil, errors.New(opts.Name + " printed " + p.Line + "; stderr:\n" + p.Stderr.String())
	}
	p.URL = url
	return p, nil
}

// ExitError is a process that exited before its startup line.
type ExitError struct {
	Name, State, Stderr string
}

func (e *ExitError) Error() string {
	return e.Name + " exited before listening (" + e.State + "); stderr:\n" + e.Stderr
}

// Stop interrupts the process and waits for it (killing it after 15 s).
func (p *Process) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Run runs `bin args…` to completion (at most 2 minutes) and returns its
// output and exit code.
func Run(tb testing.TB, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		tb.Fatalf("run %s: %v", bin, err)
	}
	return out.String(), errb.String(), code
}
