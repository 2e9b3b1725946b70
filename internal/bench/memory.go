package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// runMemory: register Sockets clients with a pull each, read the server's
// VmRSS, connect them all and leave them idle, read it again. Figure: the
// growth per socket. With ServerCmd the server is started as a child and
// restarted after the registrations, so that the baseline is a fresh
// process (the sockets' registrations are read from storage at connect)
// and holds none of the registration pulls' garbage; with PID the server
// is measured as it runs, and its RSS before the registrations is
// reported too: when the pulls leave the heap at a high-water mark, the
// sockets may fill its free part without growing RSS, and the growth
// from before the registrations bounds them from above instead.
func runMemory(ctx context.Context, r *runner) error {
	n := r.cfg.Sockets
	r.res.Params["sockets"] = n
	if r.cfg.ServerCmd != "" {
		if err := r.startServer(ctx); err != nil {
			return err
		}
	}
	if r.pid <= 0 {
		return errors.New("the server's pid is unknown: pass -pid, or -server-cmd to start it")
	}
	var beforeReg rss
	if r.cfg.ServerCmd == "" {
		var err error
		if beforeReg, err = readRSSParts(r.pid); err != nil {
			return err
		}
	}
	socks := make([]*vsocket, n)
	defer func() { closeSockets(socks) }()
	var done atomic.Int64
	r.status(func(time.Duration) string {
		return fmt.Sprintf("memory %s/%s sockets", groupThousands(done.Load()), groupThousands(int64(n)))
	})
	err := parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		s, err := r.newSocket(ctx, i)
		socks[i] = s
		done.Add(1)
		return err
	})
	if err != nil {
		return err
	}
	if r.cfg.ServerCmd != "" {
		r.stop()
		r.tr.CloseIdleConnections()
		if err := r.startServer(ctx); err != nil {
			return err
		}
		r.res.Params["restartedAfterRegistration"] = true
	}
	time.Sleep(r.cfg.settle)
	before, err := readRSSParts(r.pid)
	if err != nil {
		return err
	}
	done.Store(0)
	err = parallel(ctx, n, 64, func(ctx context.Context, i int) error {
		defer done.Add(1)
		return socks[i].connect(ctx)
	})
	if err != nil {
		return err
	}
	r.stopStatus()
	time.Sleep(r.cfg.settle)
	after, err := readRSSParts(r.pid)
	if err != nil {
		return err
	}
	r.res.add("sockets", float64(n), "")
	if beforeReg.total > 0 {
		r.res.add("server RSS before registrations", float64(beforeReg.total), "KiB")
		r.res.add("KiB per socket, from before registrations", float64(after.total-beforeReg.total)/float64(n), "KiB")
	}
	r.res.add("server RSS before connect", float64(before.total), "KiB")
	r.res.add("server RSS with sockets", float64(after.total), "KiB")
	r.res.add("KiB per socket", float64(after.total-before.total)/float64(n), "KiB")
	if before.anon > 0 || after.anon > 0 {
		// The file pages a first burst faults in are the binary's code,
		// not memory the sockets hold: the anonymous part is.
		r.res.add("KiB per socket, anonymous memory", float64(after.anon-before.anon)/float64(n), "KiB")
		r.res.add("KiB per socket, file pages", float64(after.file-before.file)/float64(n), "KiB")
	}
	return nil
}

// rss is a process's resident memory in KiB: its total (VmRSS) and its
// anonymous and file-backed parts (RssAnon, RssFile; 0 where the kernel
// does not report them).
type rss struct{ total, anon, file int64 }

// readRSS returns a process's resident set size in KiB (VmRSS).
func readRSS(pid int) (int64, error) {
	m, err := readRSSParts(pid)
	return m.total, err
}

// readRSSParts reads a process's resident memory from /proc/<pid>/status.
func readRSSParts(pid int) (rss, error) {
	var m rss
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst, found = &m.total, true
		case "RssAnon":
			dst = &m.anon
		case "RssFile":
			dst = &m.file
		default:
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		*dst = v
	}
	if !found {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// readCPUSeconds returns a process's user and system CPU time.
func readCPUSeconds(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: the fields start after ")".
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(utime+stime) / 100, nil // USER_HZ is 100 on Linux
}

// startServer starts ServerCmd (split on spaces, no shell) as a child
// process and waits until URL answers HTTP. The child is stopped with
// SIGTERM when the run ends.
func (r *runner) startServer(ctx context.Context) error {
	args := strings.Fields(r.cfg.ServerCmd)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.pid = cmd.Process.Pid
	r.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/sync", nil)
		if resp, err := r.hc.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("the server exited before answering")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the server did not answer at %s within %s", r.base, r.cfg.Timeout)
}
