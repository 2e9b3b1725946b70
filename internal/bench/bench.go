// Package bench is the load tool behind `syncgo bench`: virtual SSP2
// clients that drive a sync server over real HTTP and WebSocket
// connections, and report throughput, latency and memory figures.
//
// The tool speaks only the protocol (POST /sync, GET /segments/{id}, GET
// /realtime), through internal/sspclient and the wire codec, so it runs
// against any SSP2 server, the reference TypeScript server included: the
// authentication header is a per-client template, and the partition is
// whatever the server derives from it.
//
// Workloads: push, catchup, bootstrap, fanout, memory and reconnect; see
// the Workloads map.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Config configures one run. Zero counts and durations take the
// workload's defaults (see withDefaults).
type Config struct {
	// URL is the server's mount point: the prefix of /sync.
	URL string
	// Workload names the workload run (see Workloads).
	Workload string
	// Wire is the wire version spoken: 1, 2 or 3. Default 3.
	Wire uint16
	// AuthHeader names the authentication header. Default Authorization.
	AuthHeader string
	// Auth is the header's value for virtual client i: every "{i}" is
	// replaced by i. Writers and seeders are client 0. Default
	// "Bearer bench-{i}"; empty with AuthHeader "-" sends no header.
	Auth string
	// Partition is informational: the server derives it from Auth.
	Partition string
	// Schema encodes the rows; SchemaPath names where it came from.
	Schema     *schema.Compiled
	SchemaPath string
	// Table is the table written and subscribed to. Default: the first
	// table whose first scope column is not its primary key.
	Table string
	// Scope is the scope value the rows are written into and subscribed
	// by. Default: a fresh random value per run.
	Scope string
	// AcceptEncoding is sent on every HTTP request. Default "zstd, gzip".
	AcceptEncoding string

	Clients  int           // push, reconnect
	Duration time.Duration // push
	Round    bool          // push: a push+pull round instead of a push
	Commits  int           // catchup: seeded; fanout: pushed; reconnect: pushed while away
	Seeded   bool          // catchup, bootstrap: the data exists under Scope
	// CatchUpRows, when positive, makes the catch-up's commits update
	// that many rows in turn instead of adding a row each: a scope small
	// beside its log, which a server may answer with a fresh bootstrap
	// (§8.4) that the catch-up then follows.
	CatchUpRows int
	// ValueBytes, when positive, pads every generated string value that
	// is neither the key nor the scope to this many bytes: rows of
	// another size than the default ~100 bytes.
	ValueBytes int
	// RoundDelay is a client's own time per catch-up round (its network
	// round trip, its storage), spent waiting before the next request:
	// what a server does meanwhile for the next round shows as less
	// time than the rounds' sum.
	RoundDelay time.Duration
	Rows       int  // bootstrap
	SQLite     bool // bootstrap: accept sqlite images
	URLs       bool // bootstrap: accept signed segment URLs
	Sockets    int  // fanout, memory
	// SocketGoroutines (fanout): read every socket on a goroutine of its
	// own, parked in Go's netpoller, as the tool did before round seven,
	// instead of the tool's epoll readers (Linux), which read every ready
	// socket before handling any (see sockPoller).
	SocketGoroutines bool
	// PID is the server's process id: memory reads its VmRSS, and every
	// workload reports its resident memory and CPU time when set.
	PID int
	// WSDeflate (memory, fanout): the sockets offer permessage-deflate as
	// browsers do (Chrome's header), and the server must accept it: the
	// idle sockets' memory is then that of sockets that negotiated
	// compression, and fanout's deltas arrive compressed and are inflated
	// by the sockets' readers (the epoll readers and, with
	// SocketGoroutines, sspclient's) before they are applied.
	WSDeflate bool
	// ServerCmd starts the server as a child process (memory): its pid
	// is then known. It must listen on URL.
	ServerCmd string
	// Timeout bounds waits for deliveries and convergence. Default 30 s.
	Timeout time.Duration

	// Status receives the live one-line status (nil: none); Quiet stops
	// it.
	Status io.Writer
	Quiet  bool

	// settle is how long memory and reconnect let the server finish
	// serving before they read its resident memory. Default 2 s; tests
	// shorten it.
	settle time.Duration
	// pollerArena is the bytes a socket poller starts with for its reads
	// (default pollerArena); tests make it small so that it grows.
	pollerArena int
}

// Workloads maps each workload's name to its function.
var Workloads = map[string]func(context.Context, *runner) error{
	"push":      runPush,
	"catchup":   runCatchup,
	"bootstrap": runBootstrap,
	"fanout":    runFanout,
	"memory":    runMemory,
	"reconnect": runReconnect,
}

func (c Config) withDefaults() Config {
	if c.Wire == 0 {
		c.Wire = wire.Version3
	}
	if c.AuthHeader == "" {
		c.AuthHeader = "Authorization"
	}
	if c.Auth == "" && c.AuthHeader != "-" {
		c.Auth = "Bearer bench-{i}"
	}
	if c.AcceptEncoding == "" {
		c.AcceptEncoding = "zstd, gzip"
	}
	if c.Scope == "" {
		c.Scope = "bench-" + randomHex(6)
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.settle <= 0 {
		c.settle = 2 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	def := func(v *int, n int) {
		if *v <= 0 {
			*v = n
		}
	}
	switch c.Workload {
	case "push":
		def(&c.Clients, 64)
	case "catchup":
		def(&c.Commits, 100_000)
	case "bootstrap":
		def(&c.Rows, 100_000)
	case "fanout":
		def(&c.Sockets, 1000)
		def(&c.Commits, 200)
	case "memory":
		def(&c.Sockets, 1000)
	case "reconnect":
		def(&c.Clients, 1000)
		def(&c.Commits, 10)
	}
	return c
}

// Run runs one workload and returns its result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	fn, ok := Workloads[cfg.Workload]
	switch {
	case !ok:
		return nil, fmt.Errorf("unknown workload %q", cfg.Workload)
	case cfg.Schema == nil:
		return nil, errors.New("a schema is required")
	case !wire.SupportedVersion(cfg.Wire):
		return nil, fmt.Errorf("unsupported wire version %d", cfg.Wire)
	case cfg.WSDeflate && cfg.Workload != "memory" && cfg.Workload != "fanout":
		return nil, errors.New("-ws-deflate is for the memory and fanout workloads only")
	}
	raiseFileLimit()
	r, err := newRunner(cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	cpu0, _ := readCPUSeconds(r.pid)
	self0 := selfCPUSeconds()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.res.Params["loadavg"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if cfg.ValueBytes > 0 {
		r.res.Params["valueBytes"] = cfg.ValueBytes
	}
	if err := fn(ctx, r); err != nil {
		r.stopStatus()
		return nil, fmt.Errorf("%s: %w", cfg.Workload, err)
	}
	r.stopStatus()
	r.res.Errors = r.errors.Load()
	r.res.Elapsed = time.Since(r.res.Started).Round(time.Millisecond).String()
	r.res.add("bench tool CPU time", selfCPUSeconds()-self0, "s")
	if r.pid > 0 {
		if rss, err := readRSS(r.pid); err == nil && !r.rssDone {
			r.res.add("server RSS after", float64(rss), "KiB")
		}
		if cpu, err := readCPUSeconds(r.pid); err == nil {
			r.res.add("server CPU time during the run", cpu-cpu0, "s")
		}
	}
	return r.res, nil
}

// authHeader returns the authentication header of virtual client i.
func (c Config) authHeader(i int) http.Header {
	h := http.Header{}
	if c.AuthHeader != "-" && c.Auth != "" {
		h.Set(c.AuthHeader, strings.ReplaceAll(c.Auth, "{i}", strconv.Itoa(i)))
	}
	return h
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
