package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// benchReactionSchema is the tasks schema of the end-to-end tests.
func benchReactionSchema(b *testing.B) *schema.Compiled {
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchStores() []struct {
	name string
	open func(b *testing.B) store.Store
} {
	return []struct {
		name string
		open func(b *testing.B) store.Store
	}{
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

// BenchmarkPushReactions measures push throughput over real HTTP without
// reactions, with a planner that plans one reaction per commit (stored in
// the push transaction; no runner in the process), and with the runner
// delivering them to a handler that does nothing, as the commits come:
//
//	go test -run '^$' -bench BenchmarkPushReactions -benchtime 2000x .
//
// The clients and commits are those of BenchmarkPushValidators; in the
// deliver case the run ends when every reaction is completed. Reported:
// commits/s and the test process's CPU time per commit.
func BenchmarkPushReactions(b *testing.B) {
	for _, d := range benchStores() {
		for _, mode := range []string{"none", "plan", "plan+deliver"} {
			b.Run(d.name+"/"+mode, func(b *testing.B) { benchPushReactions(b, d.open(b), mode) })
		}
	}
}

func benchPushReactions(b *testing.B, st store.Store, mode string) {
	sc := benchReactionSchema(b)
	var delivered atomic.Int64
	cfg := syncgo.Config{Store: st, Schema: sc, RetentionInterval: -1, Authenticate: bearerAuth, ResolveScopes: allProjects}
	if mode != "none" {
		workers := -1
		if mode == "plan+deliver" {
			workers = 4
		}
		cfg.Reactions = &syncgo.ReactionConfig{Planner: taskPlanner("mail"), Workers: workers,
			Handlers: map[string]reaction.Handler{"mail": func(context.Context, *reaction.Delivery) error {
				delivered.Add(1)
				return nil
			}}}
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
	if mode == "plan+deliver" {
		for delivered.Load() < int64(b.N) {
			time.Sleep(time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/commit")
}

// BenchmarkReactionDelivery measures the runner alone: b.N reactions
// planned beforehand (100 per commit), delivered to a handler that does
// nothing by one server with Workers handlers at once:
//
//	go test -run '^$' -bench BenchmarkReactionDelivery -benchtime 2000x .
//
// Each delivery is a claim share, a completion and (SQLite) a turn of the
// single writer. Reported: reactions/s.
func BenchmarkReactionDelivery(b *testing.B) {
	for _, d := range benchStores() {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", d.name, workers), func(b *testing.B) {
				st := d.open(b)
				now := time.Now().UnixMilli()
				for c := 0; c*100 < b.N; c++ {
					var rs []store.NewReaction
					for i := c * 100; i < min(b.N, (c+1)*100); i++ {
						rs = append(rs, store.NewReaction{IdempotencyKey: fmt.Sprintf("k%d", i), Type: "mail", Version: 1,
							Payload: []byte(`{"n":1}`), SourceClientID: "c", SourceClientCommitID: fmt.Sprint(c), SourceCommitSeq: int64(c),
							CreatedAtMs: now, MaxAttempts: 3})
					}
					if err := st.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
						return tx.(store.ReactionTx).EnqueueReactions(ctx, rs)
					}); err != nil {
						b.Fatal(err)
					}
				}
				var done atomic.Int64
				all := make(chan struct{})
				srv, err := syncgo.New(syncgo.Config{Store: st, Schema: benchReactionSchema(b), RetentionInterval: -1,
					Authenticate: bearerAuth,
					ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
						return nil, nil
					},
					Reactions: &syncgo.ReactionConfig{Workers: workers, PollInterval: 10 * time.Millisecond,
						Handlers: map[string]reaction.Handler{"mail": func(context.Context, *reaction.Delivery) error {
							if done.Add(1) == int64(b.N) {
								close(all)
							}
							return nil
						}}}})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				if err := srv.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				<-all
				for { // the last completions land
					bl, err := srv.ReactionBacklog(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					if bl.Pending == 0 && bl.Running == 0 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				_ = srv.Stop(context.Background())
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reactions/s")
			})
		}
	}
}
