package syncgo_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// Durable reactions (§6.9) end to end: commits pushed over real HTTP plan
// reactions in their transaction; runners of one or several servers (and
// processes) on the same database deliver them.

// fastReactions are timings short enough for tests: the runner polls every
// 20 ms and retries after 20-100 ms.
func fastReactions(rc *syncgo.ReactionConfig) *syncgo.ReactionConfig {
	rc.PollInterval = 20 * time.Millisecond
	rc.InitialBackoff = 20 * time.Millisecond
	rc.MaxBackoff = 100 * time.Millisecond
	if rc.LeaseDuration == 0 {
		rc.LeaseDuration = 5 * time.Second
	}
	return rc
}

// taskPlanner plans one reaction of name per upserted task, keyed by the
// row id, with the task's id and title as its payload; a task titled
// "planner-fails" fails the planner, "planner-invalid" makes it plan an
// invalid reaction, "planner-nul" and "planner-tiny" a payload that
// Postgres's jsonb refuses (U+0000, 1e-999999), "many:N" plans N
// reactions.
func taskPlanner(name string) reaction.Planner {
	return func(ctx context.Context, c *reaction.Commit) ([]reaction.Plan, error) {
		var out []reaction.Plan
		for _, op := range c.Operations {
			if op.Op != validate.Upsert || op.Table != "tasks" {
				continue
			}
			title, _ := op.Row["title"].(string)
			switch {
			case title == "planner-fails":
				return nil, errors.New("planner refuses")
			case title == "planner-invalid":
				out = append(out, reaction.Plan{Key: op.RowID, Name: "Not A Name"})
				continue
			case title == "planner-nul":
				out = append(out, reaction.Plan{Key: op.RowID, Name: name, Payload: map[string]any{"s": "a\x00b"}})
				continue
			case title == "planner-tiny":
				out = append(out, reaction.Plan{Key: op.RowID, Name: name, Payload: json.RawMessage(`{"n":1e-999999}`)})
				continue
			case strings.HasPrefix(title, "many:"):
				var n int
				fmt.Sscan(strings.TrimPrefix(title, "many:"), &n)
				for i := range n {
					out = append(out, reaction.Plan{Key: fmt.Sprintf("%s/%d", op.RowID, i), Name: name,
						Payload: map[string]any{"task": op.RowID, "i": i}, MaxAttempts: 20})
				}
				continue
			}
			out = append(out, reaction.Plan{Key: op.RowID, Name: name, Version: 2,
				Payload: map[string]any{"task": op.RowID, "title": title}, MaxAttempts: 5})
		}
		return out, nil
	}
}

// reactionDB is one database that several stores (servers, processes)
// open.
type reactionDB struct {
	driver string
	dsn    string // the SQLite file or the Postgres URL
}

func newReactionDB(t *testing.T, d e2eDriver) reactionDB {
	if d.name == "sqlite" {
		return reactionDB{driver: "sqlite", dsn: filepath.Join(t.TempDir(), "sync.db")}
	}
	return reactionDB{driver: "postgres", dsn: pgtest.Schema(t, "syncgo_rx", false)}
}

func (db reactionDB) open(t testing.TB) store.Store {
	t.Helper()
	var (
		s   store.Store
		err error
	)
	if db.driver == "sqlite" {
		s, err = sqlitestore.Open(context.Background(), sqlitestore.Config{Path: db.dsn})
	} else {
		s, err = pgstore.Open(context.Background(), pgstore.Config{URL: db.dsn, MaxConns: 8})
	}
	if err != nil {
		t.Fatalf("open %s store: %v", db.driver, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reactionServer starts a server with rc on its own store of db, served
// over real HTTP.
func reactionServer(t *testing.T, db reactionDB, rc *syncgo.ReactionConfig, tweak ...func(*syncgo.Config)) *e2eEnv {
	t.Helper()
	return reactionServerOn(t, db.open(t), rc, tweak...)
}

// reactionServerOn is reactionServer on a given store.
func reactionServerOn(t *testing.T, st store.Store, rc *syncgo.ReactionConfig, tweak ...func(*syncgo.Config)) *e2eEnv {
	t.Helper()
	e := &e2eEnv{t: t, store: st, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
	cfg := syncgo.Config{Store: st, Schema: e.schema, Authenticate: bearerAuth, ResolveScopes: e.resolve,
		RetentionInterval: -1, Reactions: rc}
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	e.srv = srv
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// pushTasks pushes one commit of tasks with the titles through a client
// and returns its outcome.
func pushTasks(t *testing.T, c *sspclient.Client, project string, ids, titles []string) sspclient.Outcome {
	t.Helper()
	id, err := c.Mutate(func(tx *sspclient.Tx) error {
		for i, tid := range ids {
			if err := tx.Upsert("tasks", taskRow(tid, project, titles[i])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Push(context.Background())
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return pushed(t, res, id)
}

// waitFor polls cond until it holds, or fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reactionsIn lists every reaction stored (of any state).
func reactionsIn(t *testing.T, srv *syncgo.Server, q store.ReactionQuery) []store.Reaction {
	t.Helper()
	q.Limit = store.MaxReactionPage
	var out []store.Reaction
	for {
		page, err := srv.ListReactions(context.Background(), q)
		if err != nil {
			t.Fatalf("ListReactions: %v", err)
		}
		out = append(out, page...)
		if len(page) < q.Limit {
			return out
		}
		q.AfterPartition, q.AfterKey = page[len(page)-1].Partition, page[len(page)-1].IdempotencyKey
	}
}

func failureCode(t *testing.T, r store.Reaction) string {
	t.Helper()
	var f struct {
		Code string `json:"code"`
	}
	if r.LastFailure != nil {
		if err := json.Unmarshal(r.LastFailure, &f); err != nil {
			t.Fatalf("last failure %q: %v", r.LastFailure, err)
		}
	}
	return f.Code
}

// A handler that fails twice then succeeds runs to completion with three
// attempts recorded; it sees the planned payload, its version, the source
// commit and the stable idempotency key on every attempt; the failures'
// codes are recorded; and a replay of the commit adds no second reaction.
func TestE2EReactionRetriesThenCompletes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		type call struct {
			attempt, max int
			key          string
			payload      string
			version      int32
			seq          int64
			client       string
			partition    string
		}
		var (
			mu    sync.Mutex
			calls []call
		)
		rc := fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("mail"), Handlers: map[string]reaction.Handler{
			"mail": func(ctx context.Context, dl *reaction.Delivery) error {
				mu.Lock()
				calls = append(calls, call{dl.Attempt, dl.MaxAttempts, dl.IdempotencyKey, string(dl.Payload), dl.Version,
					dl.SourceCommitSeq, dl.SourceClientID, dl.Partition})
				mu.Unlock()
				switch dl.Attempt {
				case 1:
					return reaction.Retry("app.smtp_busy", map[string]any{"status": 421})
				case 2:
					return errors.New("connection reset: secret detail")
				}
				return nil
			}}})
		var events []reaction.Event
		rc.OnEvent = func(ev reaction.Event) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
		e := reactionServer(t, newReactionDB(t, d), rc)
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		o := pushTasks(t, c, "p1", []string{"t1"}, []string{"hello <world>"})
		if o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		key := store.ReactionIdempotencyKey(e2ePartition, c.ClientID(), o.CommitID, "t1")
		waitFor(t, 20*time.Second, "the reaction to complete", func() bool {
			rs := reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})
			return len(rs) == 1
		})
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].IdempotencyKey != key || rs[0].Attempts != 3 || rs[0].State != store.ReactionCompleted ||
			rs[0].SourceCommitSeq != o.CommitSeq || rs[0].Type != "mail" || rs[0].MaxAttempts != 5 {
			t.Fatalf("stored %+v; want %s completed after 3 attempts, from commit %d", rs, key, o.CommitSeq)
		}
		if code := failureCode(t, rs[0]); code != reaction.CodeHandlerFailed {
			t.Errorf("last failure code %q; want %s (the second failure's)", code, reaction.CodeHandlerFailed)
		}
		if strings.Contains(string(rs[0].LastFailure), "secret") {
			t.Errorf("the error's text was recorded: %s", rs[0].LastFailure)
		}
		mu.Lock()
		got := append([]call(nil), calls...)
		mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("handler ran %d times; want 3", len(got))
		}
		// The lifecycle events, in order.
		waitFor(t, 5*time.Second, "the completed event", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(events) >= 7
		})
		mu.Lock()
		var trail []string
		for _, ev := range events {
			if ev.IdempotencyKey != key || ev.Partition != e2ePartition || ev.Name != "mail" || ev.At.IsZero() ||
				(ev.Type == reaction.EventRetried) != !ev.RetryAt.IsZero() {
				t.Errorf("event %+v", ev)
			}
			trail = append(trail, fmt.Sprintf("%s/%d/%s", ev.Type, ev.Attempt, ev.Code))
		}
		mu.Unlock()
		// The push emits queued once its commit is durable, and a runner
		// may claim the reaction and emit started before that: the two
		// come in either order.
		if len(trail) > 1 && trail[1] == "reaction.queued/0/" {
			trail[0], trail[1] = trail[1], trail[0]
		}
		want := "reaction.queued/0/ reaction.started/1/ reaction.retried/1/app.smtp_busy reaction.started/2/ " +
			"reaction.retried/2/reaction.handler_failed reaction.started/3/ reaction.completed/3/"
		if strings.Join(trail, " ") != want {
			t.Errorf("events %s\nwant   %s", strings.Join(trail, " "), want)
		}
		for i, cl := range got {
			want := call{i + 1, 5, key, `{"task":"t1","title":"hello <world>"}`, 2, o.CommitSeq, c.ClientID(), e2ePartition}
			if cl != want {
				t.Errorf("call %d = %+v; want %+v", i, cl, want)
			}
		}

		// A replay of the commit (same client commit id) answers the
		// recorded result and plans nothing more.
		epoch := e.partitionState().LogEpoch
		req := encodeRequest(t, &wire.Request{Version: 3,
			Header:  &wire.ReqHeader{ClientID: "dev-r", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "rc1", Operations: []wire.Operation{e.upsertOp(t, taskRow("t2", "p1", "x"))}}}})
		for range 2 {
			m := decodeResponse(t, e.post(t, body(req), nil))
			if pr, _ := m.Frames[1].(*wire.PushResult); pr == nil || pr.Status == wire.PushRejected {
				t.Fatalf("push result %+v", m.Frames[1])
			}
		}
		waitFor(t, 20*time.Second, "the replayed commit's reaction to complete", func() bool {
			return len(reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})) == 2
		})
		if n := len(reactionsIn(t, e.srv, store.ReactionQuery{})); n != 2 {
			t.Errorf("%d reactions after a commit and its replay; want 2", n)
		}
	})
}

// A commit that does not apply plans nothing, and nothing it planned ever
// runs: a commit a validator rejects, a commit whose planner fails or
// plans an invalid reaction (the push fails as a server failure: no row,
// no result, no reaction; the client's retry later applies it), and a
// conflicting commit. The reactions of the commits that applied all run,
// once.
func TestE2EReactionRolledBackCommitPlansNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var (
			mu  sync.Mutex
			ran = map[string]int{}
		)
		var plannerOn atomic.Bool
		plannerOn.Store(true)
		inner := taskPlanner("mail")
		rc := fastReactions(&syncgo.ReactionConfig{
			Planner: func(ctx context.Context, c *reaction.Commit) ([]reaction.Plan, error) {
				if !plannerOn.Load() {
					return nil, errors.New("planner down")
				}
				return inner(ctx, c)
			},
			Handlers: map[string]reaction.Handler{"mail": func(ctx context.Context, dl *reaction.Delivery) error {
				var p struct{ Task string }
				_ = json.Unmarshal(dl.Payload, &p)
				mu.Lock()
				ran[p.Task]++
				mu.Unlock()
				return nil
			}}})
		e := reactionServer(t, newReactionDB(t, d), rc, func(c *syncgo.Config) {
			c.Validators = map[string]validate.Validator{"tasks": func(ctx context.Context, w *validate.Write) error {
				if w.Row["title"] == "rejected" {
					return validate.Reject("app.nope", "no", nil)
				}
				return nil
			}}
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		wantApplied := map[string]bool{}
		if o := pushTasks(t, c, "p1", []string{"a1", "a2"}, []string{"one", "two"}); o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		wantApplied["a1"], wantApplied["a2"] = true, true
		// Rejected by the validator at its second operation: the first
		// operation's reaction is never planned.
		if o := pushTasks(t, c, "p1", []string{"r1", "r2"}, []string{"fine", "rejected"}); o.Status != wire.PushRejected {
			t.Fatalf("push of a rejected commit: %s", statusOf(o))
		}
		// The planner fails, then plans an invalid reaction, then payloads
		// that one driver could not store: the request fails with nothing
		// recorded, on both drivers alike.
		before := e.partitionState().MaxCommitSeq
		for _, title := range []string{"planner-fails", "planner-invalid", "planner-nul", "planner-tiny"} {
			epoch := e.partitionState().LogEpoch
			req := encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: "dev-f", SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: "f-" + title, Operations: []wire.Operation{
					e.upsertOp(t, taskRow("ok-"+title, "p1", "fine")),
					e.upsertOp(t, taskRow("f-"+title, "p1", title)),
				}}}})
			r := e.post(t, body(req), nil)
			if r.status == 200 {
				m := decodeResponse(t, r)
				for _, f := range m.Frames {
					if pr, ok := f.(*wire.PushResult); ok {
						t.Fatalf("%s: the push was answered %+v; want a server failure", title, pr)
					}
				}
			}
			if _, err := e.store.PushResult(context.Background(), e2ePartition, "dev-f", "f-"+title); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: a push result was recorded (%v)", title, err)
			}
		}
		if after := e.partitionState().MaxCommitSeq; after != before {
			t.Errorf("failed plans appended commits: max seq %d → %d", before, after)
		}
		// A planner outage fails the client's push; its retry applies it
		// once the planner is back.
		plannerOn.Store(false)
		if _, err := c.Upsert("tasks", taskRow("late", "p1", "late")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Push(context.Background()); err == nil {
			t.Fatal("a push whose planner fails succeeded")
		}
		plannerOn.Store(true)
		res, err := c.Push(context.Background())
		if err != nil || len(res.Pushed) != 1 || res.Pushed[0].Status != wire.PushApplied {
			t.Fatalf("retry after the planner outage: %v %+v", err, res)
		}
		wantApplied["late"] = true
		// A conflict (a stale base version) plans nothing either.
		other := e.client("bob", sspclient.Options{})
		syncQuiet(t, other)
		mustUpsert(t, other, taskRow("a1", "p1", "changed by bob"))
		syncQuiet(t, other)
		wantApplied["a1"] = true // bob's commit plans a second reaction of a1
		if _, err := c.Upsert("tasks", map[string]any{"id": "a1", "title": "stale edit"}, sspclient.BaseVersion(1)); err != nil {
			t.Fatal(err)
		}
		res, err = c.Push(context.Background())
		if err != nil || len(res.Pushed) != 1 || res.Pushed[0].Status != wire.PushRejected {
			t.Fatalf("stale push: %v %+v", err, res)
		}
		waitFor(t, 20*time.Second, "every applied commit's reaction to complete", func() bool {
			return len(reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})) == 4
		})
		// Give a stray reaction a chance to show up before counting.
		time.Sleep(150 * time.Millisecond)
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 4 {
			t.Errorf("%d reactions stored; want 4 (a1, a2, late, a1 by bob)", len(rs))
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{"a1": 2, "a2": 1, "late": 1}
		if fmt.Sprint(ran) != fmt.Sprint(want) {
			t.Errorf("handler ran for %v; want %v", ran, want)
		}
	})
}

// A reaction whose attempts run out becomes a dead letter, kept and
// visible with its failure; a permanent failure dead-letters at once; the
// backlog counts them; an operator retry runs a dead letter again, a drop
// deletes one.
func TestE2EReactionDeadLetters(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var (
			healed atomic.Bool
			calls  sync.Map // task → *atomic.Int64
		)
		rc := fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("hook"), Handlers: map[string]reaction.Handler{
			"hook": func(ctx context.Context, dl *reaction.Delivery) error {
				var p struct{ Task, Title string }
				_ = json.Unmarshal(dl.Payload, &p)
				n, _ := calls.LoadOrStore(p.Task, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				switch {
				case healed.Load():
					return nil
				case p.Title == "permanent":
					return reaction.Permanent("app.gone", map[string]any{"why": "410"})
				case p.Title == "panics":
					panic("handler bug")
				}
				return errors.New("down")
			}}})
		e := reactionServer(t, newReactionDB(t, d), rc)
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		if o := pushTasks(t, c, "p1", []string{"d1", "d2", "d3"}, []string{"flaky", "permanent", "panics"}); o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		waitFor(t, 30*time.Second, "three dead letters", func() bool {
			return len(reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionDead})) == 3
		})
		dead := map[string]store.Reaction{}
		for _, r := range reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionDead}) {
			var k []string
			_ = json.Unmarshal([]byte(r.IdempotencyKey), &k)
			dead[k[3]] = r
		}
		for task, want := range map[string]struct {
			attempts int
			code     string
		}{"d1": {5, reaction.CodeHandlerFailed}, "d2": {1, "app.gone"}, "d3": {5, reaction.CodeHandlerFailed}} {
			r := dead[task]
			n, _ := calls.Load(task)
			if r.Attempts != want.attempts || failureCode(t, r) != want.code || n.(*atomic.Int64).Load() != int64(want.attempts) {
				t.Errorf("%s: %+v (%s), %d calls; want %d attempts and code %s", task, r, r.LastFailure, n.(*atomic.Int64).Load(),
					want.attempts, want.code)
			}
		}
		var f struct{ Details map[string]string }
		if err := json.Unmarshal(dead["d2"].LastFailure, &f); err != nil || f.Details["why"] != "410" {
			t.Errorf("permanent failure %s; want its details", dead["d2"].LastFailure)
		}
		b, err := e.srv.ReactionBacklog(context.Background())
		if err != nil || b.Dead != 3 || b.Pending != 0 || b.Running != 0 {
			t.Errorf("backlog %+v, %v; want 3 dead", b, err)
		}
		// The runner leaves dead letters alone.
		time.Sleep(200 * time.Millisecond)
		if n, _ := calls.Load("d2"); n.(*atomic.Int64).Load() != 1 {
			t.Errorf("a dead letter ran again")
		}
		healed.Store(true)
		ok, err := e.srv.RetryReaction(context.Background(), e2ePartition, dead["d1"].IdempotencyKey)
		if err != nil || !ok {
			t.Fatalf("RetryReaction = %v, %v", ok, err)
		}
		ok, err = e.srv.DropReaction(context.Background(), e2ePartition, dead["d3"].IdempotencyKey)
		if err != nil || !ok {
			t.Fatalf("DropReaction = %v, %v", ok, err)
		}
		waitFor(t, 20*time.Second, "the retried dead letter to complete", func() bool {
			return len(reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})) == 1
		})
		if r := reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})[0]; r.IdempotencyKey != dead["d1"].IdempotencyKey || r.Attempts != 1 {
			t.Errorf("completed %+v; want d1 after one more attempt", r)
		}
		b, err = e.srv.ReactionBacklog(context.Background())
		if err != nil || b.Dead != 1 || b.Pending != 0 {
			t.Errorf("backlog %+v, %v; want the one dead letter left", b, err)
		}
		if ok, err := e.srv.RetryReaction(context.Background(), e2ePartition, dead["d3"].IdempotencyKey); ok || err != nil {
			t.Errorf("RetryReaction of a dropped reaction = %v, %v", ok, err)
		}
	})
}

// The backlog: reactions planned while no runner runs are pending, with
// the age of the oldest; held by a runner, running; and the metrics say
// the same.
func TestE2EReactionBacklog(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		db := newReactionDB(t, d)
		reg := prometheus.NewRegistry()
		// A server that plans and runs nothing.
		planner := reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("mail"), Workers: -1,
			Handlers: map[string]reaction.Handler{"mail": func(context.Context, *reaction.Delivery) error { return nil }}}),
			func(c *syncgo.Config) { c.Metrics = reg })
		c := planner.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		if b, err := planner.srv.ReactionBacklog(context.Background()); err != nil || b != (syncgo.ReactionBacklog{}) {
			t.Fatalf("empty backlog %+v, %v", b, err)
		}
		if o := pushTasks(t, c, "p1", []string{"b1"}, []string{"many:7"}); o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		start := time.Now()
		time.Sleep(120 * time.Millisecond)
		b, err := planner.srv.ReactionBacklog(context.Background())
		if err != nil || b.Pending != 7 || b.Running != 0 || b.Dead != 0 || b.OldestPending < 100*time.Millisecond ||
			b.OldestPending > time.Since(start)+time.Second {
			t.Fatalf("backlog %+v, %v; want 7 pending, the oldest at least 100 ms old", b, err)
		}
		metrics := gatherReactionMetrics(t, reg)
		if metrics[`syncgo_reactions{state="pending"}`] != 7 || metrics[`syncgo_reactions{state="running"}`] != 0 ||
			metrics["syncgo_reactions_oldest_pending_seconds"] < 0.1 {
			t.Errorf("metrics %v; want 7 pending", metrics)
		}
		// A runner whose handlers hold on: 3 running, 4 pending.
		release := make(chan struct{})
		var started atomic.Int64
		runner := reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Workers: 3,
			Handlers: map[string]reaction.Handler{"mail": func(ctx context.Context, _ *reaction.Delivery) error {
				started.Add(1)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}}}))
		waitFor(t, 10*time.Second, "three handlers to start", func() bool { return started.Load() == 3 })
		b, err = runner.srv.ReactionBacklog(context.Background())
		if err != nil || b.Pending != 4 || b.Running != 3 {
			t.Errorf("backlog with 3 handlers running = %+v, %v; want 4 pending and 3 running", b, err)
		}
		metrics = gatherReactionMetrics(t, reg)
		if metrics[`syncgo_reactions{state="pending"}`] != 4 || metrics[`syncgo_reactions{state="running"}`] != 3 {
			t.Errorf("metrics %v; want 4 pending and 3 running", metrics)
		}
		close(release)
		waitFor(t, 20*time.Second, "the backlog to drain", func() bool {
			b, err := runner.srv.ReactionBacklog(context.Background())
			return err == nil && b == (syncgo.ReactionBacklog{})
		})
		if n := started.Load(); n != 7 {
			t.Errorf("%d handler calls; want 7", n)
		}
	})
}

// gatherReactionMetrics returns the reaction series of a registry, by
// name and labels.
func gatherReactionMetrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.Contains(mf.GetName(), "reaction") {
			continue
		}
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Several runners (servers with stores of their own on one database) and
// many reactions, some of whose attempts fail: every reaction completes,
// and its handler succeeds exactly once; no two runners ever run one
// reaction at the same time.
func TestE2EReactionConcurrentRunners(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		const runners, commits, perCommit = 4, 10, 20
		db := newReactionDB(t, d)
		var (
			mu        sync.Mutex
			successes = map[string]int{}
			inFlight  = map[string]bool{}
			attempts  atomic.Int64
		)
		handler := func(ctx context.Context, dl *reaction.Delivery) error {
			attempts.Add(1)
			mu.Lock()
			if inFlight[dl.IdempotencyKey] {
				t.Errorf("%s runs twice at once", dl.IdempotencyKey)
			}
			inFlight[dl.IdempotencyKey] = true
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(inFlight, dl.IdempotencyKey)
				mu.Unlock()
			}()
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			if rand.IntN(5) == 0 {
				return errors.New("flaky")
			}
			mu.Lock()
			successes[dl.IdempotencyKey]++
			mu.Unlock()
			return nil
		}
		envs := make([]*e2eEnv, runners)
		for i := range envs {
			envs[i] = reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("mail"), Workers: 3,
				Handlers: map[string]reaction.Handler{"mail": handler}}))
		}
		// Commits arrive at every server concurrently.
		var wg sync.WaitGroup
		for i, e := range envs {
			wg.Go(func() {
				c := e.client(fmt.Sprintf("actor-%d", i), sspclient.Options{})
				if _, err := c.SyncUntilQuiet(context.Background(), 50); err != nil {
					t.Error(err)
					return
				}
				for k := range commits / runners * 2 {
					id := fmt.Sprintf("t-%d-%d", i, k)
					if _, err := c.Upsert("tasks", taskRow(id, "p1", fmt.Sprintf("many:%d", perCommit/2))); err != nil {
						t.Error(err)
						return
					}
					res, err := c.Push(context.Background())
					if err != nil || len(res.Pushed) != 1 || res.Pushed[0].Status != wire.PushApplied {
						t.Errorf("push: %v %+v", err, res)
						return
					}
				}
			})
		}
		wg.Wait()
		total := runners * (commits / runners * 2) * (perCommit / 2)
		waitFor(t, 60*time.Second, fmt.Sprintf("%d reactions to complete", total), func() bool {
			b, err := envs[0].srv.ReactionBacklog(context.Background())
			return err == nil && b.Pending == 0 && b.Running == 0 &&
				len(reactionsIn(t, envs[0].srv, store.ReactionQuery{State: store.ReactionCompleted})) == total
		})
		mu.Lock()
		defer mu.Unlock()
		if len(successes) != total {
			t.Errorf("%d reactions succeeded; want %d", len(successes), total)
		}
		for k, n := range successes {
			if n != 1 {
				t.Errorf("%s succeeded %d times", k, n)
			}
		}
		var recorded int64
		for _, r := range reactionsIn(t, envs[0].srv, store.ReactionQuery{}) {
			recorded += int64(r.Attempts)
		}
		if recorded != attempts.Load() {
			t.Errorf("%d attempts recorded, %d handler calls", recorded, attempts.Load())
		}
		t.Logf("%d reactions, %d attempts across %d runners", total, attempts.Load(), runners)
	})
}

// Environment of the child process of TestE2EReactionLeaseTakeover.
const (
	rxChildEnv   = "SYNCGO_REACTION_CHILD" // the driver
	rxChildDSN   = "SYNCGO_REACTION_CHILD_DSN"
	rxChildLease = 900 * time.Millisecond
)

// TestReactionChildProcess is the body of the child process that
// TestE2EReactionLeaseTakeover kills: a server whose runner claims the
// reaction, says so on stdout, and holds it (renewing its lease) until
// the process dies. Run directly, it skips.
func TestReactionChildProcess(t *testing.T) {
	driver := os.Getenv(rxChildEnv)
	if driver == "" {
		t.Skip("the child process of TestE2EReactionLeaseTakeover")
	}
	db := reactionDB{driver: driver, dsn: os.Getenv(rxChildDSN)}
	st := db.open(t)
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: e2eSchema(t, 1), Authenticate: bearerAuth,
		ResolveScopes:     func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil },
		RetentionInterval: -1,
		Reactions: fastReactions(&syncgo.ReactionConfig{Workers: 1, LeaseDuration: rxChildLease,
			Handlers: map[string]reaction.Handler{"mail": func(ctx context.Context, dl *reaction.Delivery) error {
				fmt.Printf("started %s %d\n", dl.IdempotencyKey, dl.Attempt)
				<-ctx.Done() // until the process dies
				return ctx.Err()
			}}})})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {} // killed by the parent
}

// A process killed while it holds a reaction's lease: while it lived, its
// renewals kept another server's runner away (well past the lease's
// duration); once it is dead, the other runner takes the reaction over
// after the lease expires, at the next attempt, and completes it.
func TestE2EReactionLeaseTakeover(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		db := newReactionDB(t, d)
		var (
			mu    sync.Mutex
			runs  []int
			runAt time.Time
		)
		handler := func(ctx context.Context, dl *reaction.Delivery) error {
			mu.Lock()
			runs = append(runs, dl.Attempt)
			runAt = time.Now()
			mu.Unlock()
			return nil
		}
		// The planning server runs nothing: the child claims first.
		e := reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("mail"), Workers: -1,
			Handlers: map[string]reaction.Handler{"mail": handler}}))
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		o := pushTasks(t, c, "p1", []string{"k1"}, []string{"take over"})
		if o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		key := store.ReactionIdempotencyKey(e2ePartition, c.ClientID(), o.CommitID, "k1")

		cmd := exec.Command(os.Args[0], "-test.run=^TestReactionChildProcess$", "-test.v")
		cmd.Env = append(os.Environ(), rxChildEnv+"="+db.driver, rxChildDSN+"="+db.dsn)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		want := fmt.Sprintf("started %s 1", key)
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the child exited before it claimed the reaction")
				}
				if l == want {
					break wait
				}
			case <-timeout:
				t.Fatal("the child did not claim the reaction")
			}
		}
		// A runner in this process: while the child lives and renews,
		// it must not run the reaction.
		reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Workers: 2, LeaseDuration: rxChildLease,
			Handlers: map[string]reaction.Handler{"mail": handler}}))
		time.Sleep(3 * rxChildLease)
		mu.Lock()
		early := len(runs)
		mu.Unlock()
		if early != 0 {
			t.Fatalf("the reaction ran in a second process while the first held a valid lease")
		}
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].State != store.ReactionLeased || rs[0].Attempts != 1 || rs[0].LeaseOwner == "" ||
			rs[0].LeaseExpiresAtMs < time.Now().UnixMilli() {
			t.Fatalf("while the child lives: %+v; want leased by it, its lease renewed", rs)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		_ = cmd.Wait()
		expiry := time.UnixMilli(reactionsIn(t, e.srv, store.ReactionQuery{})[0].LeaseExpiresAtMs)
		waitFor(t, 20*time.Second, "the reaction to complete after the takeover", func() bool {
			return len(reactionsIn(t, e.srv, store.ReactionQuery{State: store.ReactionCompleted})) == 1
		})
		mu.Lock()
		defer mu.Unlock()
		if len(runs) != 1 || runs[0] != 2 {
			t.Errorf("runs after the kill: attempts %v; want one run, at attempt 2", runs)
		}
		if runAt.Before(expiry) {
			t.Errorf("the reaction ran at %v, before the dead process's lease expired at %v", runAt, expiry)
		}
		if r := reactionsIn(t, e.srv, store.ReactionQuery{})[0]; r.Attempts != 2 {
			t.Errorf("completed after %d attempts; want 2", r.Attempts)
		}
		t.Logf("taken over %v after the kill (lease %v)", runAt.Sub(killed).Round(time.Millisecond), rxChildLease)
	})
}

// noReactionStore hides the reaction methods of a store.
type noReactionStore struct{ store.Store }

// New refuses a reaction configuration that could not work: a handler
// name that is not code-like, a nil handler, a planner without handlers,
// a store that keeps no reactions.
func TestNewRefusesReactionMisconfiguration(t *testing.T) {
	st := openSQLite(t)
	ok := func(context.Context, *reaction.Delivery) error { return nil }
	for name, c := range map[string]struct {
		store store.Store
		rc    *syncgo.ReactionConfig
	}{
		"name":          {st, &syncgo.ReactionConfig{Handlers: map[string]reaction.Handler{"not a name": ok}}},
		"nil handler":   {st, &syncgo.ReactionConfig{Handlers: map[string]reaction.Handler{"mail": nil}}},
		"planner alone": {st, &syncgo.ReactionConfig{Planner: taskPlanner("mail")}},
		"store":         {noReactionStore{st}, &syncgo.ReactionConfig{Handlers: map[string]reaction.Handler{"mail": ok}}},
	} {
		_, err := syncgo.New(syncgo.Config{Store: c.store, Schema: e2eSchema(t, 1), Authenticate: bearerAuth,
			ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil },
			Reactions:     c.rc})
		if err == nil {
			t.Errorf("%s: New accepted %+v", name, c.rc)
		}
	}
	srv, err := syncgo.New(syncgo.Config{Store: noReactionStore{st}, Schema: e2eSchema(t, 1), Authenticate: bearerAuth,
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ReactionBacklog(context.Background()); !errors.Is(err, syncgo.ErrNoReactions) {
		t.Errorf("ReactionBacklog on a store without reactions = %v; want ErrNoReactions", err)
	}
}

// Terminal reactions past their retention are pruned, and each pass
// reports itself (reaction.prune_completed); pending ones stay.
func TestE2EReactionPrune(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var release atomic.Bool
		rc := fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("hook"), Handlers: map[string]reaction.Handler{
			"hook": func(ctx context.Context, dl *reaction.Delivery) error {
				var p struct{ Task, Title string }
				_ = json.Unmarshal(dl.Payload, &p)
				switch {
				case p.Title == "permanent":
					return reaction.Permanent("app.gone", nil)
				case p.Title == "later" && !release.Load():
					return errors.New("not yet")
				}
				return nil
			}}})
		rc.CompletedRetention, rc.DeadRetention, rc.PruneInterval = time.Millisecond, time.Millisecond, 50*time.Millisecond
		var (
			mu     sync.Mutex
			prunes []reaction.PruneSummary
		)
		rc.OnEvent = func(ev reaction.Event) {
			if ev.Type == reaction.EventPruneCompleted {
				mu.Lock()
				prunes = append(prunes, *ev.Prune)
				mu.Unlock()
			}
		}
		e := reactionServer(t, newReactionDB(t, d), rc)
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		if o := pushTasks(t, c, "p1", []string{"a", "b", "c"}, []string{"ok", "permanent", "later"}); o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		waitFor(t, 20*time.Second, "the completed and dead-lettered reactions to be pruned", func() bool {
			mu.Lock()
			defer mu.Unlock()
			completed, dead := 0, 0
			for _, p := range prunes {
				completed += p.Completed
				dead += p.DeadLettered
			}
			return completed == 1 && dead == 1
		})
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].State == store.ReactionCompleted || rs[0].State == store.ReactionDead {
			t.Fatalf("after pruning: %+v; want only the pending reaction", rs)
		}
		mu.Lock()
		p := prunes[len(prunes)-1]
		mu.Unlock()
		if p.Limit != 1000 || p.MayHaveMore || p.CompletedBefore.IsZero() || p.CompletedBefore.After(time.Now()) {
			t.Fatalf("prune summary %+v", p)
		}
		release.Store(true)
	})
}

// A Stop whose context ends while a handler runs gives the reaction back
// (pending, the attempt not counted) before it returns: the host closes
// the store right after Stop (docs/reactions.md, "On Stop … their
// reactions given back"; Server.Stop: "The store stays open; its owner
// closes it"), and a release still under way then never lands: the
// reaction would wait out its lease and count the attempt.
func TestE2EReactionStopGivesBackBeforeReturning(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		db := newReactionDB(t, d)
		e := reactionServer(t, db, fastReactions(&syncgo.ReactionConfig{Planner: taskPlanner("mail"), Workers: -1,
			Handlers: map[string]reaction.Handler{"mail": func(context.Context, *reaction.Delivery) error { return nil }}}))
		started := make(chan struct{}, 1)
		handler := func(ctx context.Context, dl *reaction.Delivery) error {
			started <- struct{}{}
			<-ctx.Done()
			// A prompt return that still takes a moment (closing a
			// connection, say).
			time.Sleep(100 * time.Millisecond)
			return ctx.Err()
		}
		st := db.open(t)
		srv, err := syncgo.New(syncgo.Config{Store: st, Schema: e.schema, Authenticate: bearerAuth, ResolveScopes: e.resolve,
			RetentionInterval: -1, Reactions: fastReactions(&syncgo.ReactionConfig{Workers: 1,
				Handlers: map[string]reaction.Handler{"mail": handler}})})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		if o := pushTasks(t, c, "p1", []string{"s1"}, []string{"stop"}); o.Status != wire.PushApplied {
			t.Fatalf("push: %s", statusOf(o))
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the handler did not start")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := srv.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop: %v; want its context's deadline", err)
		}
		// What a host does next.
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].State != store.ReactionPending || rs[0].Attempts != 0 {
			for _, r := range rs {
				t.Logf("reaction %s: %s, attempt %d, lease owner %q", r.IdempotencyKey, r.State, r.Attempts, r.LeaseOwner)
			}
			t.Fatal("after Stop and the store's Close: want the reaction pending again, its attempt not counted")
		}
	})
}
