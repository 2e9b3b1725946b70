package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/syncgo/syncgo/internal/bench"
)

const benchUsage = `usage: syncgo bench -workload NAME [flags]
       syncgo bench summarize [LABEL=]DIR...   Markdown table of the medians of -json results

Drives virtual SSP2 clients over HTTP and WebSocket against a running
server and prints the figures (and writes them as JSON with -json).

workloads:
  push       -clients N each pushing one-upsert commits for -duration
             (push-only requests; -round: push+pull rounds): commits/s, latency
  catchup    seed -commits one-upsert commits (500 per request; -seeded: they
             exist under -scope), pull them from cursor 0, limitCommits 1000
  bootstrap  seed a -rows table (-seeded: it exists under -scope), bootstrap it
             cold and warm by rows segments (-sqlite: accept sqlite images)
  fanout     -sockets subscribed sockets, -commits pushed one at a time:
             delivery latency from the push response
  memory     -sockets idle sockets: server VmRSS growth per socket
             (-pid, or -server-cmd to start the server as a child)
  reconnect  -clients connected clients drop at once while -commits are
             pushed, reconnect at once and pull: time until all converge

flags:
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "summarize" {
		return runBenchSummarize(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		cfg        bench.Config
		wireV      uint
		schemaPath string
		jsonPath   string
	)
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8787", "server mount point (the prefix of /sync)")
	fs.StringVar(&cfg.Workload, "workload", "", "workload: push, catchup, bootstrap, fanout, memory or reconnect")
	fs.UintVar(&wireV, "wire", 3, "wire version spoken: 1, 2 or 3 (the reference 0.15 server speaks 2)")
	fs.StringVar(&cfg.AuthHeader, "auth-header", "Authorization", `authentication header name ("-": none)`)
	fs.StringVar(&cfg.Auth, "auth", "Bearer bench-{i}", "authentication header value; {i} is the virtual client's index (writers and seeders are 0)")
	fs.StringVar(&cfg.Partition, "partition", "", "the partition the server derives from the auth (informational, reported)")
	fs.StringVar(&schemaPath, "schema", "", "schema IR JSON file to encode rows with (default: the demo schema of syncgo serve)")
	fs.StringVar(&cfg.Table, "table", "", "table to write and subscribe to (default: the first with a scope column besides its key)")
	fs.StringVar(&cfg.Scope, "scope", "", "scope value written into and subscribed by (default: fresh per run)")
	fs.StringVar(&cfg.AcceptEncoding, "accept-encoding", "zstd, gzip", "Accept-Encoding of every request")
	fs.IntVar(&cfg.Clients, "clients", 0, "virtual clients (push: 64, reconnect: 1000)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "push: how long to push")
	fs.BoolVar(&cfg.Round, "round", false, "push: push+pull rounds instead of push-only requests")
	fs.IntVar(&cfg.Commits, "commits", 0, "catchup: commits seeded (100000); fanout: commits pushed (200); reconnect: commits pushed while away (10)")
	fs.BoolVar(&cfg.Seeded, "seeded", false, "catchup, bootstrap: the data already exists under -scope")
	fs.IntVar(&cfg.ValueBytes, "value-bytes", 0, "pad the generated string values (not keys or scopes) to this many bytes: larger rows than the default ~100 bytes")
	fs.IntVar(&cfg.CatchUpRows, "catchup-rows", 0, "catchup: the commits update this many rows in turn (0: each adds a row); a server may answer such a catch-up with a fresh bootstrap (§8.4), which the catch-up follows")
	fs.DurationVar(&cfg.RoundDelay, "round-delay", 0, "catchup: the client's own time per round (a network round trip), waited before the next request")
	fs.IntVar(&cfg.Rows, "rows", 0, "bootstrap: rows seeded (100000)")
	fs.BoolVar(&cfg.SQLite, "sqlite", false, "bootstrap: also accept sqlite images (accept bit 2)")
	fs.BoolVar(&cfg.URLs, "urls", false, "bootstrap: also accept signed segment URLs (accept bit 3) and fetch segments from them")
	fs.IntVar(&cfg.Sockets, "sockets", 0, "fanout, memory: sockets (1000)")
	fs.BoolVar(&cfg.SocketGoroutines, "socket-goroutines", false, "fanout: read each socket on a goroutine of its own (the reader before round seven) instead of the tool's epoll readers")
	fs.IntVar(&cfg.PID, "pid", 0, "the server's process id: its VmRSS and CPU time are reported")
	fs.BoolVar(&cfg.WSDeflate, "ws-deflate", false, "memory, fanout: the sockets offer permessage-deflate (as browsers do), the server must accept it, and compressed messages are inflated")
	fs.StringVar(&cfg.ServerCmd, "server-cmd", "", "memory: start the server with this command (split on spaces; it must listen on -url)")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "bound of every wait for deliveries, convergence and server start")
	fs.StringVar(&jsonPath, "json", "", "also write the result as JSON to this file")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "no live status line")
	var cpuProfile string
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write the bench tool's own CPU profile to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "syncgo bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "syncgo bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	names := make([]string, 0, len(bench.Workloads))
	for name := range bench.Workloads {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Contains(names, cfg.Workload) {
		fmt.Fprintf(stderr, "syncgo bench: -workload must be one of %s\n", strings.Join(names, ", "))
		return 2
	}
	if cfg.Seeded && cfg.Scope == "" {
		fmt.Fprintln(stderr, "syncgo bench: -seeded needs the -scope the data was seeded under")
		return 2
	}
	sc, err := loadSchema(schemaPath)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo bench: schema:", err)
		return 1
	}
	cfg.Wire, cfg.Schema, cfg.SchemaPath, cfg.Status = uint16(wireV), sc, schemaPath, stderr
	if schemaPath == "" {
		cfg.SchemaPath = "(demo schema)"
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo bench:", err)
		return 1
	}
	if err := res.WriteTable(stdout); err != nil {
		return 1
	}
	if jsonPath != "" {
		if err := res.WriteJSON(jsonPath); err != nil {
			fmt.Fprintln(stderr, "syncgo bench:", err)
			return 1
		}
	}
	return 0
}

// runBenchSummarize prints the Markdown table of medians of result
// directories: syncgo bench summarize [LABEL=]DIR...
func runBenchSummarize(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: syncgo bench summarize [LABEL=]DIR... (each DIR holds the -json results of one server setup)")
		return 2
	}
	sets := make([]bench.Set, 0, len(args))
	for _, a := range args {
		label, dir, ok := strings.Cut(a, "=")
		if !ok {
			label, dir = filepath.Base(filepath.Clean(a)), a
		}
		s, err := bench.LoadSet(label, dir)
		if err != nil {
			fmt.Fprintln(stderr, "syncgo bench summarize:", err)
			return 1
		}
		sets = append(sets, s)
	}
	if err := bench.WriteSummary(stdout, sets); err != nil {
		return 1
	}
	return 0
}
