package syncgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/webhook"
	"github.com/syncgo/syncgo/wire"
)

// Webhook endpoints that misbehave, each behind a real HTTP server, on
// both drivers: what docs/reactions.md promises for each (retried or
// dead-lettered, with which code), a bounded read of the answer, no
// redirect followed, and pushes that neither slow down nor fail while
// the endpoints hang or are gone.
func TestE2EWebhookEndpointFaults(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var mu sync.Mutex
		hits := map[string]int{}
		hit := func(name string) {
			mu.Lock()
			hits[name]++
			mu.Unlock()
		}
		hitsOf := func(name string) int {
			mu.Lock()
			defer mu.Unlock()
			return hits[name]
		}
		serve := func(name string, h http.HandlerFunc) string {
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hit(name)
				_, _ = io.Copy(io.Discard, r.Body)
				h(w, r)
			}))
			t.Cleanup(s.Close)
			return s.URL
		}
		// An endpoint that never answers (until the delivery gives up).
		hang := serve("hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		fail := serve("http5xx", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
		refuse := serve("http4xx", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
		elsewhere := serve("elsewhere", func(w http.ResponseWriter, r *http.Request) {})
		redirect := serve("redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere+"/in", http.StatusTemporaryRedirect)
		})
		// 200 and then an endless body: the delivery reads a bounded part.
		var hugeWritten atomic.Int64
		huge := serve("huge", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			chunk := []byte(strings.Repeat("x", 64<<10))
			for range 4096 { // 256 MiB at most
				n, err := w.Write(chunk)
				hugeWritten.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit("tls") }))
		// The deliveries' refused handshakes are expected: kept out of
		// the test output.
		tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
		tlsSrv.StartTLS()
		t.Cleanup(tlsSrv.Close)

		tasks := []string{"tasks"}
		hooks := []webhook.Hook{
			{Name: "hang", URL: hang, Tables: tasks, Timeout: 150 * time.Millisecond, MaxAttempts: 2},
			{Name: "http5xx", URL: fail, Tables: tasks, MaxAttempts: 3},
			{Name: "http4xx", URL: refuse, Tables: tasks, MaxAttempts: 5},
			{Name: "redirect", URL: redirect, Tables: tasks, MaxAttempts: 5},
			{Name: "huge", URL: huge, Tables: tasks, Timeout: 20 * time.Second, MaxAttempts: 1},
			{Name: "gone", URL: gone.URL, Tables: tasks, MaxAttempts: 2},
			// The test server's certificate is not trusted by the
			// delivery's client: a TLS error, a network error.
			{Name: "tls", URL: tlsSrv.URL, Tables: tasks, MaxAttempts: 2},
		}
		e := reactionServer(t, newReactionDB(t, d), nil, func(c *syncgo.Config) {
			planner, handlers, err := webhook.Reactions(hooks, c.Schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers})
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		// Pushes while every endpoint misbehaves: each applied, promptly.
		var slowest time.Duration
		for i := range 10 {
			start := time.Now()
			if o := pushTasks(t, c, "p1", []string{fmt.Sprintf("t%d", i)}, []string{"x"}); o.Status != wire.PushApplied {
				t.Fatalf("push %d: %s", i, statusOf(o))
			}
			slowest = max(slowest, time.Since(start))
		}
		if slowest > 2*time.Second {
			t.Errorf("the slowest push took %v while the webhook endpoints failed; a push must not wait on them", slowest)
		}
		want := map[string]struct {
			state    store.ReactionState
			attempts int
			code     string
			status   int
			reason   string
		}{
			"hang":     {store.ReactionDead, 2, webhook.CodeUnreachable, 0, "timeout"},
			"http5xx":  {store.ReactionDead, 3, webhook.CodeUnavailable, http.StatusBadGateway, ""},
			"http4xx":  {store.ReactionDead, 1, webhook.CodeRefused, http.StatusNotFound, ""},
			"redirect": {store.ReactionDead, 1, webhook.CodeRefused, http.StatusTemporaryRedirect, ""},
			"huge":     {store.ReactionCompleted, 1, "", 0, ""},
			"gone":     {store.ReactionDead, 2, webhook.CodeUnreachable, 0, "refused"},
			"tls":      {store.ReactionDead, 2, webhook.CodeUnreachable, 0, "tls"},
		}
		settled := func() bool {
			n := 0
			for _, r := range reactionsIn(t, e.srv, store.ReactionQuery{}) {
				if r.State == store.ReactionDead || r.State == store.ReactionCompleted {
					n++
				}
			}
			return n == 10*len(hooks)
		}
		waitFor(t, 60*time.Second, "every delivery completed or dead-lettered", settled)
		for _, r := range reactionsIn(t, e.srv, store.ReactionQuery{}) {
			w := want[r.Type]
			var f struct {
				Code    string
				Details struct {
					Status int
					Reason string
				}
			}
			if r.LastFailure != nil {
				if err := json.Unmarshal(r.LastFailure, &f); err != nil {
					t.Fatal(err)
				}
			}
			if r.State != w.state || r.Attempts != w.attempts || f.Code != w.code || f.Details.Status != w.status || f.Details.Reason != w.reason {
				t.Errorf("%s %s: %s after %d attempts, failure %s; want %s after %d, code %q status %d reason %q",
					r.Type, r.IdempotencyKey, r.State, r.Attempts, r.LastFailure, w.state, w.attempts, w.code, w.status, w.reason)
			}
		}
		if n := hitsOf("elsewhere"); n != 0 {
			t.Errorf("the redirect was followed %d times; docs/reactions.md: a redirect is not followed", n)
		}
		if n := hitsOf("tls"); n != 0 {
			t.Errorf("the untrusted TLS endpoint was served %d requests", n)
		}
		// Each event's 2 attempts are checked above; an attempt whose
		// 150 ms ran out before the endpoint read its request (a loaded
		// host) never reaches it, so only the most is exact.
		if n := hitsOf("hang"); n == 0 || n > 20 {
			t.Errorf("the hanging endpoint got %d requests; want at most 2 attempts of 10 events", n)
		}
		if n := hugeWritten.Load(); n >= 256<<20 {
			t.Errorf("the delivery read all %d bytes of an endless answer", n)
		}
		b, err := e.srv.ReactionBacklog(context.Background())
		if err != nil || b.Dead != 60 {
			t.Errorf("backlog %+v, %v; want 60 dead letters (6 failing hooks × 10 events)", b, err)
		}
		// Delivered or dead, the pushes still answer promptly.
		start := time.Now()
		if o := pushTasks(t, c, "p1", []string{"after"}, []string{"x"}); o.Status != wire.PushApplied || time.Since(start) > 2*time.Second {
			t.Errorf("push after the failures: %s in %v", statusOf(o), time.Since(start))
		}
	})
}

// A hook renamed in the config leaves the events planned under its old
// name pending: no runner has that handler (docs/reactions.md), while the
// events of the new name are delivered; the backlog shows the old ones.
func TestE2EWebhookRenamedHookLeavesEventsPending(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var got atomic.Int64
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
		defer rcv.Close()
		hooked := func(name string, workers int) func(*syncgo.Config) {
			return func(c *syncgo.Config) {
				planner, handlers, err := webhook.Reactions([]webhook.Hook{{Name: name, URL: rcv.URL, Tables: []string{"tasks"}}}, c.Schema, nil)
				if err != nil {
					t.Fatal(err)
				}
				c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers, Workers: workers})
			}
		}
		db := newReactionDB(t, d)
		e1 := reactionServer(t, db, nil, hooked("old-name", -1))
		c1 := e1.client("alice", sspclient.Options{})
		syncQuiet(t, c1)
		if o := pushTasks(t, c1, "p1", []string{"t1"}, []string{"x"}); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e1.srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		e := reactionServer(t, db, nil, hooked("new-name", 0))
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		if o := pushTasks(t, c, "p1", []string{"t2"}, []string{"x"}); o.Status != wire.PushApplied {
			t.Fatal(statusOf(o))
		}
		waitFor(t, 10*time.Second, "the new hook's event delivered", func() bool { return got.Load() == 1 })
		time.Sleep(200 * time.Millisecond) // ten polls
		pending := reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionPending})
		b, err := e.srv.ReactionBacklog(context.Background())
		if got.Load() != 1 || len(pending) != 1 || pending[0].Type != "old-name" || err != nil || b.Pending != 1 {
			t.Errorf("%d deliveries, pending %v, backlog %+v (%v); want the old name's event pending, undelivered", got.Load(), pending, b, err)
		}
	})
}

// A hook whose endpoint hangs does not hold up the other hooks: it
// occupies at most every worker but one (docs/reactions.md), and a
// healthy hook's events arrive as the commits are pushed, not after the
// hanging deliveries' timeouts.
func TestE2EWebhookHangingHookDoesNotHoldUpOthers(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var got atomic.Int64
		healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
		defer healthy.Close()
		quit := make(chan struct{})
		hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		}))
		defer hang.Close()
		defer close(quit)
		e := reactionServer(t, newReactionDB(t, d), nil, func(c *syncgo.Config) {
			planner, handlers, err := webhook.Reactions([]webhook.Hook{
				{Name: "hanging", URL: hang.URL, Tables: []string{"tasks"}, Timeout: 30 * time.Second},
				{Name: "healthy", URL: healthy.URL, Tables: []string{"tasks"}}}, c.Schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers})
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		const commits = 12
		for i := range commits {
			if o := pushTasks(t, c, "p1", []string{fmt.Sprintf("t%d", i)}, []string{"x"}); o.Status != wire.PushApplied {
				t.Fatal(statusOf(o))
			}
		}
		pushed := time.Now()
		// With every worker held by the hanging hook, the healthy events
		// would wait 30 s per round of 4 hanging deliveries (90 s for
		// 12); the margin is for a loaded host.
		deadline := pushed.Add(10 * time.Second)
		for got.Load() < commits {
			if time.Now().After(deadline) {
				t.Fatalf("the healthy hook got %d of %d events in %v while the other hook's endpoint hung", got.Load(), commits,
					time.Since(pushed).Round(time.Millisecond))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
