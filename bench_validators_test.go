package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkPushValidators measures push throughput over real HTTP with no
// write rule, and with one row validator and one whole-commit validator
// installed, each making one authoritative query per push:
//
//	go test -run '^$' -bench BenchmarkPushValidators -benchtime 2000x .
//
// benchPushClients clients push concurrently, each a commit of one new
// open task in its own project per request (push-only). The row validator
// is the open-task cap of the invariant test (a count of the project's
// open tasks, on an index of (project_id, done), bounded by the cap); the
// commit validator checks every operation's title and asks whether the
// project holds a done task (an exists query). Neither rejects. Reported:
// commits/s over the whole run, and the test process's CPU time per
// commit (server and clients; Postgres's own CPU is not in it), a figure
// the machine's load inflates less than throughput.
func BenchmarkPushValidators(b *testing.B) {
	for _, d := range benchDrivers() {
		for _, rules := range []bool{false, true} {
			name := d.name + "/none"
			if rules {
				name = d.name + "/validator+commit-validator"
			}
			b.Run(name, func(b *testing.B) { benchPush(b, d.open(b), rules) })
		}
	}
}

// benchDriver opens a fresh store of one driver for a benchmark.
type benchDriver struct {
	name string
	open func(b *testing.B) store.Store
}

// benchDrivers are the storage drivers the benchmarks of this package run
// on: an SQLite file, and a fresh schema of the test Postgres.
func benchDrivers() []benchDriver {
	return []benchDriver{
		{"sqlite", func(b *testing.B) store.Store {
			s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(b.TempDir(), "sync.db")})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"postgres", func(b *testing.B) store.Store {
			s, err := pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.Schema(b, "syncgo_bench", false), MaxConns: 8})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
}

// startBenchServer starts a server of cfg over real HTTP and returns its
// URL; both stop when the benchmark ends.
func startBenchServer(b *testing.B, cfg syncgo.Config) string {
	b.Helper()
	srv, err := syncgo.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Stop(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	return hs.URL
}

// startE2EBenchServer starts a server of the e2e schema (version 1) on
// driver d, with bearer auth and every project granted, and returns its
// URL and schema.
func startE2EBenchServer(b *testing.B, d benchDriver) (string, *schema.Compiled) {
	b.Helper()
	sc := e2eSchema(b, 1)
	return startBenchServer(b, syncgo.Config{Store: d.open(b), Schema: sc, RetentionInterval: -1, Authenticate: bearerAuth,
		ResolveScopes: allProjects}), sc
}

// allProjects is a scope resolver that grants every actor every project.
func allProjects(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
	return map[string][]string{"project_id": {"*"}}, nil
}

const benchPushClients = 32

func benchPush(b *testing.B, st store.Store, rules bool) {
	sc, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
		Scope("project:{project_id}").Index("tasks_open", "project_id", "done").
		Compile()
	if err != nil {
		b.Fatal(err)
	}
	cfg := syncgo.Config{Store: st, Schema: sc, RetentionInterval: -1, Authenticate: bearerAuth, ResolveScopes: allProjects}
	if rules {
		cfg.Validators = map[string]validate.Validator{"tasks": openTaskCap(1000, nil)}
		cfg.CommitValidator = func(ctx context.Context, c *validate.Commit) error {
			for _, op := range c.Operations {
				if op.Row != nil && op.Row["title"] == "" {
					return validate.Reject("app.untitled", "a task needs a title", nil)
				}
			}
			_, err := c.Tx.Exists(ctx, store.Query{Table: "tasks",
				Where: []store.Filter{store.Eq("project_id", c.Operations[0].Row["project_id"]), store.Eq("done", true)}})
			return err
		}
	}
	url := startBenchServer(b, cfg)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchPushClients}}
	clients := make([]*sspclient.Client, benchPushClients)
	for i := range clients {
		c, err := sspclient.New(url, fmt.Sprintf("bench-%d", i), sc, sspclient.Options{HTTPClient: hc})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.SyncUntilQuiet(context.Background(), 5); err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	for i, c := range clients {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				id, err := c.Upsert("tasks", taskRow(fmt.Sprintf("t%d", n), fmt.Sprintf("p%d", i), "x"))
				if err != nil {
					b.Error(err)
					return
				}
				res, err := c.Push(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				if o := res.Pushed[0]; o.CommitID != id || o.Status != wire.PushApplied {
					b.Errorf("push: %s", statusOf(o))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/commit")
}

// processCPU is this process's CPU time (user and system): server and
// clients, but not Postgres.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
