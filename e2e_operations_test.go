package syncgo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The remote-operation tests (REMOTE.md) run the server over real HTTP and
// WebSocket on both drivers: registered queries and commands over POST
// /operations, live query watches over GET /operations/realtime.

// opsSchema is tasks and labels, both scoped by project.
func opsSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
		Scope("project:{project_id}").
		Table("labels", "id", schema.String("id"), schema.String("project_id"), schema.String("name")).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// opsFixture is a server with the test registry, and what its commands
// and privileged queries observed.
type opsFixture struct {
	*e2eEnv
	metrics    *prometheus.Registry
	runs       atomic.Int64 // createTask Run calls
	authorized atomic.Int64 // taskCount Authorize calls
}

// awaitWatchListener waits, on a store with a commit listener, until the
// server's watch hub has begun listening and handled it (a rerun of
// every watch, of none before the test opens one): a watch opened after
// it sees no such rerun unless the listener reconnects.
func (f *opsFixture) awaitWatchListener(t *testing.T) {
	t.Helper()
	if _, ok := f.store.(store.CommitListener); !ok {
		return
	}
	eventually(t, "the watch hub's commit listener to listen", func() bool {
		return gatheredCounter(t, f.metrics, "syncgo_commit_listener_connects_total", "listener", "watches") >= 1
	})
}

// gatheredCounter is the value of the counter of name whose label k is v
// in reg, or 0 when it has no such series.
func gatheredCounter(t *testing.T, reg *prometheus.Registry, name, k, v string) float64 {
	t.Helper()
	m := gatheredSeries(t, reg, name, k, v)
	return m.GetCounter().GetValue() // 0 for a nil m
}

// gatheredSeries is the series of name whose label k is v in reg, or nil.
func gatheredSeries(t *testing.T, reg *prometheus.Registry, name, k, v string) *dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					return m
				}
			}
		}
	}
	return nil
}

func projectCoverage(p syncgo.Params) ([]syncgo.Coverage, error) {
	return []syncgo.Coverage{{Table: "tasks", Scopes: map[string][]string{"project_id": {p["project"].(string)}}}}, nil
}

func newOpsFixture(t *testing.T, d e2eDriver, tweak ...func(*syncgo.Config)) *opsFixture {
	t.Helper()
	return newOpsFixtureOn(t, d.open(t), tweak...)
}

// newOpsFixtureOn is newOpsFixture on a given store.
func newOpsFixtureOn(t *testing.T, st store.Store, tweak ...func(*syncgo.Config)) *opsFixture {
	t.Helper()
	f := &opsFixture{metrics: prometheus.NewRegistry()}
	taskCols := []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}, {Name: "title", Type: wire.TypeString},
		{Name: "done", Type: wire.TypeBoolean}, {Name: "rank", Type: wire.TypeInteger, Nullable: true},
		{Name: "notes", Type: wire.TypeJSON, Nullable: true}}
	ops := syncgo.Operations{
		MaxRequestBytes: 4 << 10,
		Queries: []syncgo.Query{
			{ID: "tasksByProject", SQL: "SELECT id, title, done, rank, notes FROM tasks WHERE project_id = :project ORDER BY id",
				Params: []syncgo.Param{{Name: "project", Type: wire.TypeString}}, Columns: taskCols, MaxRows: 100,
				Coverage: projectCoverage},
			// The SQL does not filter by project: the coverage does.
			{ID: "tasksCovered", SQL: "SELECT id, title, done, rank, notes FROM tasks ORDER BY id", Tables: []string{"tasks"},
				Params: []syncgo.Param{{Name: "project", Type: wire.TypeString}}, Columns: taskCols, MaxRows: 100,
				Coverage: func(p syncgo.Params) ([]syncgo.Coverage, error) {
					return projectCoverage(p)
				}},
			{ID: "allTasks", SQL: "SELECT t.id, t.project_id, (SELECT count(*) FROM labels l WHERE l.project_id = t.project_id) AS labels FROM tasks t ORDER BY t.id",
				Columns: []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}, {Name: "project_id", Type: wire.TypeString},
					{Name: "labels", Type: wire.TypeInteger}},
				MaxRows: 3,
				Coverage: func(syncgo.Params) ([]syncgo.Coverage, error) {
					all := map[string][]string{"project_id": {syncgo.AllAllowed}}
					return []syncgo.Coverage{{Table: "tasks", Scopes: all}, {Table: "labels", Scopes: all}}, nil
				}},
			{ID: "rankedAbove", SQL: "SELECT id FROM tasks WHERE rank > :min ORDER BY id",
				Params:  []syncgo.Param{{Name: "min", Type: wire.TypeInteger}},
				Columns: []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}}, MaxRows: 100,
				Coverage: func(syncgo.Params) ([]syncgo.Coverage, error) {
					return []syncgo.Coverage{{Table: "tasks", Scopes: map[string][]string{"project_id": {syncgo.AllAllowed}}}}, nil
				}},
			{ID: "taskCount", SQL: "SELECT count(*) AS n FROM tasks",
				Columns: []syncgo.ResultColumn{{Name: "n", Type: wire.TypeInteger}}, MaxRows: 1,
				Authorize: func(_ context.Context, c syncgo.Caller, _ syncgo.Params) (bool, error) {
					f.authorized.Add(1)
					return c.ActorID == "admin", nil
				}},
			{ID: "labelsOf", SQL: "SELECT id, name FROM labels WHERE project_id = :project ORDER BY id",
				Params:  []syncgo.Param{{Name: "project", Type: wire.TypeString}},
				Columns: []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}, {Name: "name", Type: wire.TypeString}},
				MaxRows: 100,
				Coverage: func(p syncgo.Params) ([]syncgo.Coverage, error) {
					return []syncgo.Coverage{{Table: "labels", Scopes: map[string][]string{"project_id": {p["project"].(string)}}}}, nil
				}},
		},
		Commands: []syncgo.Command{
			{ID: "createTask",
				Authorize: func(_ context.Context, c syncgo.Caller, _ any) (bool, error) { return c.ActorID != "nobody", nil },
				Run: func(ctx context.Context, c *syncgo.CommandContext, input any) ([]syncgo.Mutation, error) {
					f.runs.Add(1)
					in := input.(map[string]any)
					id := in["id"].(string)
					rank := any(nil)
					if old, ok, err := c.Row(ctx, "tasks", id); err != nil {
						return nil, err
					} else if ok && old["rank"] != nil {
						rank = old["rank"].(int64) + 1
					}
					return []syncgo.Mutation{syncgo.Upsert("tasks", map[string]any{"id": id, "project_id": in["project"],
						"title": in["title"], "done": false, "rank": rank, "notes": map[string]any{"by": c.ActorID}})}, nil
				}},
			{ID: "nothing",
				Authorize: func(context.Context, syncgo.Caller, any) (bool, error) { return true, nil },
				Run:       func(context.Context, *syncgo.CommandContext, any) ([]syncgo.Mutation, error) { return nil, nil }},
		},
	}
	f.e2eEnv = newOpsEnv(t, st, ops, append([]func(*syncgo.Config){func(c *syncgo.Config) { c.Metrics = f.metrics }}, tweak...)...)
	return f
}

// newOpsEnv is newE2EEnv with the operations schema and registry; tweak
// adjusts its Config.
func newOpsEnv(t *testing.T, st store.Store, ops syncgo.Operations, tweak ...func(*syncgo.Config)) *e2eEnv {
	t.Helper()
	e := &e2eEnv{t: t, store: st, schema: opsSchema(t), allowed: map[string]map[string][]string{}}
	cfg := syncgo.Config{Store: e.store, Schema: e.schema, Authenticate: bearerAuth,
		ResolveScopes: e.resolve, RetentionInterval: -1, Operations: ops}
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
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e.srv = srv
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// opResult is a decoded operation response.
type opResult struct {
	status int
	msg    map[string]any
}

func (r opResult) code() string {
	if r.msg["kind"] != "error" {
		return ""
	}
	return r.msg["code"].(string)
}

// postOp posts an encoded request object and decodes the response.
func postOp(t *testing.T, e *e2eEnv, token string, req remotewire.Object) opResult {
	t.Helper()
	body, err := remotewire.Encode(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	return postOpBytes(t, e, token, remotewire.ContentType, body)
}

func postOpBytes(t *testing.T, e *e2eEnv, token, contentType string, body []byte) opResult {
	t.Helper()
	hr, _ := http.NewRequest(http.MethodPost, e.url+"/operations", bytes.NewReader(body))
	hr.Header.Set("Content-Type", contentType)
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := opResult{status: resp.StatusCode}
	if resp.Header.Get("Content-Type") == remotewire.ContentType {
		v, err := remotewire.Decode(b)
		if err != nil {
			t.Fatalf("response does not decode: %v (%s)", err, b)
		}
		out.msg = plain(v).(map[string]any)
	} else {
		out.msg = map[string]any{}
		_ = json.Unmarshal(b, &out.msg)
	}
	return out
}

// plain turns a decoded value into maps and slices.
func plain(v any) any {
	switch x := v.(type) {
	case remotewire.Object:
		m := map[string]any{}
		for _, f := range x {
			m[f.Key] = plain(f.Value)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	}
	return v
}

func query(clientID, op string, params remotewire.Object) remotewire.Object {
	o := remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "query"}, {Key: "clientId", Value: clientID},
		{Key: "operationId", Value: op}}
	if params != nil {
		o = append(o, remotewire.Field{Key: "params", Value: params})
	}
	return o
}

func command(clientID, op, requestID string, params remotewire.Object) remotewire.Object {
	return remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "command"}, {Key: "clientId", Value: clientID},
		{Key: "operationId", Value: op}, {Key: "requestId", Value: requestID}, {Key: "params", Value: params}}
}

func project(p string) remotewire.Object { return remotewire.Object{{Key: "project", Value: p}} }

// rowIDs lists the "id" of a query response's rows.
func rowIDs(t *testing.T, r opResult) []string {
	t.Helper()
	if r.msg["kind"] != "query" {
		t.Fatalf("not a query result: %v", r.msg)
	}
	var ids []string
	for _, row := range r.msg["rows"].([]any) {
		ids = append(ids, row.(map[string]any)["id"].(string))
	}
	return ids
}

// seed pushes rows through a real client of an actor.
func seed(t *testing.T, e *e2eEnv, token, table string, rows ...map[string]any) {
	t.Helper()
	c := e.client(token, sspclient.Options{})
	for _, r := range rows {
		if _, err := c.Upsert(table, r); err != nil {
			t.Fatal(err)
		}
	}
	syncQuiet(t, c)
}

func label(id, project, name string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "name": name}
}

func TestOperationsQueryIsolation(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		r1, r2 := taskRow("t1", "p1", "one"), taskRow("t2", "p1", "two")
		r1["rank"], r1["notes"] = int64(7), `{"a":1}`
		seed(t, f.e2eEnv, "alice", "tasks", r1, r2, taskRow("t3", "p2", "three"))
		seed(t, f.e2eEnv, "alice", "labels", label("l1", "p1", "red"))
		seed(t, f.e2eEnv, "bob@other", "tasks", taskRow("t9", "p1", "other partition"))
		maxSeq := f.partitionState().MaxCommitSeq

		res := postOp(t, f.e2eEnv, "alice", query("w1", "tasksByProject", project("p1")))
		if got := rowIDs(t, res); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Fatalf("tasksByProject p1: %v", got)
		}
		if res.msg["maxCommitSeq"] != float64(maxSeq) {
			t.Fatalf("maxCommitSeq %v, want %d", res.msg["maxCommitSeq"], maxSeq)
		}
		first := res.msg["rows"].([]any)[0].(map[string]any)
		if first["rank"] != float64(7) || first["notes"] != `{"a":1}` || first["done"] != false || first["title"] != "one" {
			t.Fatalf("normalized row %v", first)
		}
		// The SQL reads every task; the coverage restricts it to p1, and
		// the partition binding keeps t9 (partition "other") out.
		if got := rowIDs(t, postOp(t, f.e2eEnv, "alice", query("w1", "tasksCovered", project("p1")))); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Fatalf("tasksCovered p1: %v", got)
		}
		if got := rowIDs(t, postOp(t, f.e2eEnv, "bob@other", query("w1", "tasksCovered", project("p1")))); !slices.Equal(got, []string{"t9"}) {
			t.Fatalf("tasksCovered p1 in partition other: %v", got)
		}
		// An actor allowed only p2.
		f.allow("carol", map[string][]string{"project_id": {"p2"}})
		if c := postOp(t, f.e2eEnv, "carol", query("w1", "tasksByProject", project("p1"))).code(); c != "operation.forbidden" {
			t.Fatalf("carol reading p1: %q", c)
		}
		all := postOp(t, f.e2eEnv, "carol", query("w1", "allTasks", nil))
		if got := rowIDs(t, all); !slices.Equal(got, []string{"t3"}) {
			t.Fatalf("allTasks for carol: %v", got)
		}
		// The label of p1 is outside carol's coverage: the subquery
		// counts none.
		if n := all.msg["rows"].([]any)[0].(map[string]any)["labels"]; n != float64(0) {
			t.Fatalf("carol sees %v labels of p2", n)
		}
		if got := rowIDs(t, postOp(t, f.e2eEnv, "carol", query("w1", "rankedAbove", remotewire.Object{{Key: "min", Value: int64(1)}}))); len(got) != 0 {
			t.Fatalf("rankedAbove for carol: %v", got)
		}
		if got := rowIDs(t, postOp(t, f.e2eEnv, "alice", query("w1", "rankedAbove", remotewire.Object{{Key: "min", Value: 1.0}}))); !slices.Equal(got, []string{"t1"}) {
			t.Fatalf("rankedAbove for alice: %v", got)
		}
		// The resolver failing fails closed.
		f.allow("dave", nil)
		if c := postOp(t, f.e2eEnv, "dave", query("w1", "allTasks", nil)).code(); c != "operation.forbidden" {
			t.Fatalf("resolver outage: %q", c)
		}
		// Privileged: Authorize decides; the partition still binds.
		if c := postOp(t, f.e2eEnv, "alice", query("w1", "taskCount", nil)).code(); c != "operation.forbidden" {
			t.Fatalf("taskCount for alice: %q", c)
		}
		n := postOp(t, f.e2eEnv, "admin", query("w1", "taskCount", nil))
		if rows := n.msg["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["n"] != float64(3) {
			t.Fatalf("taskCount for admin: %v", n.msg)
		}
		// Four rows over MaxRows 3: refused, never truncated.
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t4", "p2", "four"))
		if c := postOp(t, f.e2eEnv, "alice", query("w1", "allTasks", nil)).code(); c != "operation.result_too_large" {
			t.Fatalf("allTasks over MaxRows: %q", c)
		}
	})
}

func TestOperationsBadInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
		cases := []struct {
			name string
			req  remotewire.Object
			want string
		}{
			{"unknown operation", query("c1", "nope", nil), "operation.unknown"},
			{"query id as a command", command("c1", "tasksByProject", "r1", project("p1")), "operation.unknown"},
			{"command id as a query", query("c1", "createTask", nil), "operation.unknown"},
			{"param of the wrong type", query("c1", "tasksByProject", remotewire.Object{{Key: "project", Value: int64(1)}}), "operation.invalid_request"},
			{"non-integral integer", query("c1", "rankedAbove", remotewire.Object{{Key: "min", Value: 1.5}}), "operation.invalid_request"},
			{"missing param", query("c1", "tasksByProject", remotewire.Object{}), "operation.invalid_request"},
			{"undeclared param", query("c1", "tasksByProject", remotewire.Object{{Key: "project", Value: "p1"}, {Key: "x", Value: "y"}}), "operation.invalid_request"},
			{"params not an object", append(query("c1", "tasksByProject", nil), remotewire.Field{Key: "params", Value: "p1"}), "operation.invalid_request"},
			{"no requestId", remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "command"}, {Key: "clientId", Value: "c1"}, {Key: "operationId", Value: "createTask"}}, "operation.invalid_request"},
			{"revision 2", append(remotewire.Object{{Key: "revision", Value: 2}}, query("c1", "allTasks", nil)[1:]...), "operation.invalid_request"},
			{"reserved clientId", query(`["remote-command","x"]`, "allTasks", nil), "sync.invalid_client_id"},
			{"empty command", command("c1", "nothing", "r1", nil), "operation.invalid_request"},
			{"unauthorized command", command("c1", "createTask", "r1", nil), ""},
		}
		for _, c := range cases {
			token := "alice"
			if c.name == "unauthorized command" {
				token, c.want = "nobody", "operation.forbidden"
			}
			r := postOp(t, f.e2eEnv, token, c.req)
			if r.status != http.StatusOK || r.code() != c.want {
				t.Errorf("%s: HTTP %d %v, want 200 %s", c.name, r.status, r.msg, c.want)
			}
		}
		// A clientId bound by a sync client of another actor.
		bound := f.client("mallory", sspclient.Options{})
		mustSubscribe(t, bound, "s", "p1")
		syncQuiet(t, bound)
		if r := postOp(t, f.e2eEnv, "alice", query(bound.ClientID(), "allTasks", nil)); r.code() != "sync.invalid_client_id" {
			t.Errorf("clientId of another actor: %v", r.msg)
		}
		if r := postOp(t, f.e2eEnv, "mallory", query(bound.ClientID(), "allTasks", nil)); r.code() != "" {
			t.Errorf("clientId of the same actor: %v", r.msg)
		}
		for name, body := range map[string]string{"not JSON": "{", "not a tagged value": `{"revision":1}`,
			"duplicate key": `{"t":"object","v":[["kind",{"t":"string","v":"query"}],["kind",{"t":"string","v":"query"}]]}`} {
			if r := postOpBytes(t, f.e2eEnv, "alice", remotewire.ContentType, []byte(body)); r.status != 200 || r.code() != "operation.invalid_request" {
				t.Errorf("%s: HTTP %d %v", name, r.status, r.msg)
			}
		}
		big := query("c1", "tasksByProject", project(strings.Repeat("x", 8<<10)))
		b, _ := remotewire.Encode(nil, big)
		if r := postOpBytes(t, f.e2eEnv, "alice", remotewire.ContentType, b); r.status != http.StatusRequestEntityTooLarge || r.code() != "operation.invalid_request" {
			t.Errorf("oversize body: HTTP %d %v", r.status, r.msg)
		}
		b, _ = remotewire.Encode(nil, query("c1", "allTasks", nil))
		if r := postOpBytes(t, f.e2eEnv, "alice", "application/json", b); r.status != http.StatusUnsupportedMediaType || r.msg["code"] != "operation.invalid_request" {
			t.Errorf("wrong content type: HTTP %d %v", r.status, r.msg)
		}
		if r := postOpBytes(t, f.e2eEnv, "", remotewire.ContentType, b); r.status != http.StatusUnauthorized || r.msg["code"] != "sync.auth_required" {
			t.Errorf("no credentials: HTTP %d %v", r.status, r.msg)
		}
		if f.runs.Load() != 0 {
			t.Errorf("a refused command ran %d times", f.runs.Load())
		}
	})
}

func TestOperationsCommandCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t0", "p1", "zero"))
		// A realtime subscriber of p1 and a client that pulls later.
		sub := f.client("alice", sspclient.Options{})
		mustSubscribe(t, sub, "s", "p1")
		syncQuiet(t, sub)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rt, err := sub.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if floor, ok := sub.AckFloor(); ok {
			_ = rt.Ack(floor)
		}
		puller := f.client("bob", sspclient.Options{})
		mustSubscribe(t, puller, "s", "p1")
		syncQuiet(t, puller)
		before := f.partitionState().MaxCommitSeq

		in := remotewire.Object{{Key: "id", Value: "t5"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "from a worker"}}
		r := postOp(t, f.e2eEnv, "worker", command("job-runner", "createTask", "req-1", in))
		if r.msg["kind"] != "command" || r.msg["status"] != "applied" || r.msg["commitSeq"] != float64(before+1) {
			t.Fatalf("command: %v", r.msg)
		}
		if res := r.msg["results"].([]any); len(res) != 1 || res[0].(map[string]any)["status"] != "applied" {
			t.Fatalf("command results: %v", r.msg["results"])
		}
		// The identical retry is cached: no second run, no new commit.
		again := postOp(t, f.e2eEnv, "worker", command("job-runner", "createTask", "req-1", in))
		if again.msg["status"] != "cached" || again.msg["commitSeq"] != float64(before+1) || f.runs.Load() != 1 {
			t.Fatalf("retry: %v (runs %d)", again.msg, f.runs.Load())
		}
		if got := f.partitionState().MaxCommitSeq; got != before+1 {
			t.Fatalf("maxCommitSeq %d after a retry, want %d", got, before+1)
		}
		// The same requestId of another actor is another command.
		other := postOp(t, f.e2eEnv, "worker2", command("job-runner", "createTask", "req-1", in))
		if other.msg["status"] != "applied" || other.msg["commitSeq"] != float64(before+2) {
			t.Fatalf("another actor's request: %v", other.msg)
		}
		// The socket delivers the commits as deltas.
		deadline := time.Now().Add(15 * time.Second)
		for {
			if row, ok := sub.Row("tasks", "t5"); ok && row.Version == 2 {
				vals := row.Map(mustTable(t, f.schema, "tasks"))
				if vals["title"] != "from a worker" || vals["rank"] != nil || vals["notes"] != `{"by":"worker2"}` {
					t.Fatalf("delivered row %v", vals)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the command's commits did not reach the realtime subscriber")
			}
			m, err := rt.Next()
			if err != nil {
				t.Fatalf("realtime: %v", err)
			}
			if m.Delta != nil {
				if _, err := sub.ApplyDelta(m.Delta); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A pull of another client sees it, with the commit's identity in
		// the server-command namespace.
		syncQuiet(t, puller)
		if row, ok := puller.Row("tasks", "t5"); !ok || row.Version != 2 {
			t.Fatalf("pull after the command: %v %v", row, ok)
		}
		// Command reads see only what the caller may write: for a caller
		// allowed p2 only the row is absent, so the command upserts a
		// fresh rank, and the push path then refuses the p1 write.
		f.allow("p2worker", map[string][]string{"project_id": {"p2"}})
		rej := postOp(t, f.e2eEnv, "p2worker", command("job-runner", "createTask", "req-9", in))
		if rej.msg["status"] != "rejected" || rej.msg["commitSeq"] != nil {
			t.Fatalf("out-of-scope command: %v", rej.msg)
		}
		if res := rej.msg["results"].([]any)[0].(map[string]any); res["code"] != "sync.forbidden" {
			t.Fatalf("out-of-scope result: %v", res)
		}
		// A rejection replays as itself.
		if again := postOp(t, f.e2eEnv, "p2worker", command("job-runner", "createTask", "req-9", in)); again.msg["status"] != "rejected" {
			t.Fatalf("replayed rejection: %v", again.msg)
		}
		// The commits are in the log under the reserved namespace.
		commits, err := f.store.ReadCommits(context.Background(), e2ePartition, before, before+2, 10)
		if err != nil || len(commits) != 2 {
			t.Fatalf("ReadCommits: %v %v", commits, err)
		}
		if want := `["remote-command","worker","job-runner"]`; commits[0].ClientID != want || commits[0].ClientCommitID != `["createTask","req-1"]` {
			t.Fatalf("commit identity %q %q", commits[0].ClientID, commits[0].ClientCommitID)
		}
	})
}

// A command whose commit plans reactions announces them as a client's
// push does: a reaction.queued event, and a wake-up of the runner, which
// runs the reaction at once rather than at its next poll (an hour here).
func TestOperationsCommandPlansReactions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var queued atomic.Int64
		ran := make(chan string, 4)
		f := newOpsFixture(t, d, func(c *syncgo.Config) {
			c.Reactions = &syncgo.ReactionConfig{Planner: taskPlanner("mail"), PollInterval: time.Hour,
				Handlers: map[string]reaction.Handler{"mail": func(_ context.Context, dl *reaction.Delivery) error {
					ran <- dl.IdempotencyKey
					return nil
				}},
				OnEvent: func(ev reaction.Event) {
					if ev.Type == reaction.EventQueued {
						queued.Add(1)
					}
				}}
		})
		in := remotewire.Object{{Key: "id", Value: "t5"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "from a worker"}}
		if r := postOp(t, f.e2eEnv, "alice", command("worker", "createTask", "r1", in)); r.status != 200 {
			t.Fatalf("command: %d %s", r.status, r.code())
		}
		select {
		case <-ran:
		case <-time.After(rtWait):
			t.Fatalf("the command's reaction did not run within %v: the runner was not woken", rtWait)
		}
		if n := queued.Load(); n != 1 {
			t.Errorf("%d reaction.queued events; want 1", n)
		}
	})
}

func mustTable(t *testing.T, sc *schema.Compiled, name string) *schema.CompiledTable {
	t.Helper()
	tb, ok := sc.Table(name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	return tb
}

// watchSock is a client of GET /operations/realtime.
type watchSock struct {
	t    *testing.T
	conn interface {
		io.ReadWriter
		Close() error
	}
	msgs chan map[string]any
	mu   sync.Mutex
}

func dialWatch(t *testing.T, e *e2eEnv, token string) *watchSock {
	t.Helper()
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/operations/realtime"
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token}})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, br, _, err := d.Dial(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	s := &watchSock{t: t, conn: conn, msgs: make(chan map[string]any, 64)}
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	go func() {
		defer close(s.msgs)
		for {
			b, _, err := wsutil.ReadServerData(struct {
				io.Reader
				io.Writer
			}{r, conn})
			if err != nil {
				return
			}
			v, err := remotewire.Decode(b)
			if err != nil {
				s.msgs <- map[string]any{"undecodable": string(b)}
				continue
			}
			s.msgs <- plain(v).(map[string]any)
		}
	}()
	t.Cleanup(func() { _ = conn.Close() })
	return s
}

func (s *watchSock) send(m remotewire.Object) {
	s.t.Helper()
	b, err := remotewire.Encode(nil, m)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := wsutil.WriteClientText(s.conn, b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *watchSock) watch(id, op string, params remotewire.Object) {
	s.send(remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "watch"}, {Key: "watchId", Value: id},
		{Key: "clientId", Value: "watcher"}, {Key: "operationId", Value: op}, {Key: "params", Value: params}})
}

func (s *watchSock) next() map[string]any {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			s.t.Fatal("the watch socket closed")
		}
		return m
	case <-time.After(15 * time.Second):
		s.t.Fatal("no watch message")
	}
	return nil
}

func snapshotIDs(t *testing.T, m map[string]any) []string {
	t.Helper()
	if m["kind"] != "snapshot" {
		t.Fatalf("not a snapshot: %v", m)
	}
	ids := []string{}
	for _, r := range m["rows"].([]any) {
		ids = append(ids, r.(map[string]any)["id"].(string))
	}
	return ids
}

func TestOperationsWatch(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
		f.awaitWatchListener(t)
		w := dialWatch(t, f.e2eEnv, "alice")
		w.watch("tasks", "tasksByProject", project("p1"))
		w.watch("labels", "labelsOf", project("p1"))
		byWatch := func() (map[string]any, map[string]any) {
			var tasks, labels map[string]any
			for tasks == nil || labels == nil {
				m := w.next()
				switch m["watchId"] {
				case "tasks":
					tasks = m
				case "labels":
					labels = m
				default:
					t.Fatalf("unexpected message %v", m)
				}
			}
			return tasks, labels
		}
		tasks, labels := byWatch()
		if got := snapshotIDs(t, tasks); !slices.Equal(got, []string{"t1"}) {
			t.Fatalf("first tasks snapshot %v", got)
		}
		if got := snapshotIDs(t, labels); len(got) != 0 {
			t.Fatalf("first labels snapshot %v", got)
		}
		// A commit to labels reruns the labels watch only: its snapshot
		// arrives, and the next tasks snapshot is the one of the
		// following tasks commit.
		seed(t, f.e2eEnv, "alice", "labels", label("l1", "p1", "red"))
		seqLabels := f.partitionState().MaxCommitSeq
		m := w.next()
		if m["watchId"] != "labels" || !slices.Equal(snapshotIDs(t, m), []string{"l1"}) || m["maxCommitSeq"] != float64(seqLabels) {
			t.Fatalf("after a labels commit: %v", m)
		}
		// Commits of another partition rerun nothing either.
		seed(t, f.e2eEnv, "alice@elsewhere", "tasks", taskRow("x1", "p1", "elsewhere"))
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t2", "p1", "two"))
		seqTasks := f.partitionState().MaxCommitSeq
		m = w.next()
		if m["watchId"] != "tasks" || !slices.Equal(snapshotIDs(t, m), []string{"t1", "t2"}) || m["maxCommitSeq"] != float64(seqTasks) {
			t.Fatalf("after a tasks commit: %v", m)
		}
		// A command's commit reruns it too.
		r := postOp(t, f.e2eEnv, "alice", command("job", "createTask", "r1",
			remotewire.Object{{Key: "id", Value: "t3"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "cmd"}}))
		m = w.next()
		if m["watchId"] != "tasks" || !slices.Equal(snapshotIDs(t, m), []string{"t1", "t2", "t3"}) || m["maxCommitSeq"] != r.msg["commitSeq"] {
			t.Fatalf("after a command: %v (command %v)", m, r.msg)
		}
		// Bad watches answer watch_error; the socket goes on.
		w.watch("tasks", "tasksByProject", project("p1"))
		if m := w.next(); m["kind"] != "watch_error" || m["watchId"] != "tasks" || m["code"] != "operation.invalid_request" {
			t.Fatalf("duplicate watchId: %v", m)
		}
		w.watch("w2", "createTask", nil)
		if m := w.next(); m["kind"] != "watch_error" || m["code"] != "operation.unknown" {
			t.Fatalf("watching a command: %v", m)
		}
		w.watch("w3", "tasksByProject", remotewire.Object{{Key: "project", Value: 1.0}})
		if m := w.next(); m["kind"] != "watch_error" || m["code"] != "operation.invalid_request" {
			t.Fatalf("bad params: %v", m)
		}
		f.allow("alice", map[string][]string{"project_id": {"p1"}})
		w.watch("w4", "tasksByProject", project("p9"))
		if m := w.next(); m["kind"] != "watch_error" || m["watchId"] != "w4" || m["code"] != "operation.forbidden" {
			t.Fatalf("forbidden watch: %v", m)
		}
		// After unwatch, a tasks commit sends nothing for it; the labels
		// watch still runs.
		w.send(remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "tasks"}})
		w.send(remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "w4"}})
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t4", "p1", "four"))
		seed(t, f.e2eEnv, "alice", "labels", label("l2", "p1", "blue"))
		m = w.next()
		if m["watchId"] != "labels" || !slices.Equal(snapshotIDs(t, m), []string{"l1", "l2"}) {
			t.Fatalf("after unwatch: %v", m)
		}
	})
}

// TestOperationsRegistry: registration refuses what could not run safely.
func TestOperationsRegistry(t *testing.T) {
	st := openSQLite(t)
	cols := []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}}
	cover := func(syncgo.Params) ([]syncgo.Coverage, error) { return nil, nil }
	cases := map[string]syncgo.Query{
		"qualified table":  {ID: "q", SQL: "SELECT id FROM main.tasks", Columns: cols, MaxRows: 1, Coverage: cover},
		"internal table":   {ID: "q", SQL: "SELECT commit_seq AS id FROM sync_commits", Columns: cols, MaxRows: 1, Coverage: cover},
		"meta column":      {ID: "q", SQL: "SELECT _sync_partition AS id FROM tasks", Columns: cols, MaxRows: 1, Coverage: cover},
		"undeclared param": {ID: "q", SQL: "SELECT id FROM tasks WHERE id = :x", Columns: cols, MaxRows: 1, Coverage: cover},
		"bad param type": {ID: "q", SQL: "SELECT id FROM tasks WHERE id = :x", Columns: cols, MaxRows: 1, Coverage: cover,
			Params: []syncgo.Param{{Name: "x", Type: wire.TypeCRDT}}},
		"no columns":       {ID: "q", SQL: "SELECT id FROM tasks", MaxRows: 1, Coverage: cover},
		"duplicate column": {ID: "q", SQL: "SELECT id FROM tasks", Columns: append(cols, cols...), MaxRows: 1, Coverage: cover},
		"maxRows 0":        {ID: "q", SQL: "SELECT id FROM tasks", Columns: cols, Coverage: cover},
		"maxRows 10001":    {ID: "q", SQL: "SELECT id FROM tasks", Columns: cols, MaxRows: 10001, Coverage: cover},
		"no access mode":   {ID: "q", SQL: "SELECT id FROM tasks", Columns: cols, MaxRows: 1},
		"tables mismatch":  {ID: "q", SQL: "SELECT id FROM tasks", Tables: []string{"labels"}, Columns: cols, MaxRows: 1, Coverage: cover},
		"not a select":     {ID: "q", SQL: "DELETE FROM tasks", Columns: cols, MaxRows: 1, Coverage: cover},
		"two statements":   {ID: "q", SQL: "SELECT id FROM tasks; SELECT 1", Columns: cols, MaxRows: 1, Coverage: cover},
		"positional param": {ID: "q", SQL: "SELECT id FROM tasks WHERE id = ?", Columns: cols, MaxRows: 1, Coverage: cover},
	}
	for name, q := range cases {
		_, err := syncgo.New(syncgo.Config{Store: st, Schema: opsSchema(t), Authenticate: bearerAuth,
			ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil },
			Operations:    syncgo.Operations{Queries: []syncgo.Query{q}}})
		if err == nil {
			t.Errorf("%s: registered", name)
		}
	}
	dup := syncgo.Operations{Queries: []syncgo.Query{{ID: "x", SQL: "SELECT id FROM tasks", Columns: cols, MaxRows: 1, Coverage: cover}},
		Commands: []syncgo.Command{{ID: "x", Authorize: func(context.Context, syncgo.Caller, any) (bool, error) { return true, nil },
			Run: func(context.Context, *syncgo.CommandContext, any) ([]syncgo.Mutation, error) { return nil, nil }}}}
	if _, err := syncgo.New(syncgo.Config{Store: st, Schema: opsSchema(t), Authenticate: bearerAuth,
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil }, Operations: dup}); err == nil {
		t.Error("a query and a command with one id registered")
	}
}

// twoOpsServers returns two server fixtures, each on its own pool (and
// commit listener) of one Postgres schema, as two processes of a fleet.
func twoOpsServers(t *testing.T, schemaName string) (a, b *opsFixture) {
	t.Helper()
	url := pgtest.Schema(t, schemaName, false)
	open := func() store.Store {
		s, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return newOpsFixtureOn(t, open()), newOpsFixtureOn(t, open())
}

// TestOperationsWatchAcrossServers: on Postgres, a commit made through
// another server process (here a second Server on its own pool and commit
// listener) reruns a watch of this one, and an unrelated one does not.
func TestOperationsWatchAcrossServers(t *testing.T) {
	a, b := twoOpsServers(t, "syncgo_opsmp")
	a.awaitWatchListener(t)
	w := dialWatch(t, a.e2eEnv, "alice")
	w.watch("tasks", "tasksByProject", project("p1"))
	if got := snapshotIDs(t, w.next()); len(got) != 0 {
		t.Fatalf("first snapshot %v", got)
	}
	seed(t, b.e2eEnv, "alice", "labels", label("l1", "p1", "red"))
	seed(t, b.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
	seq := b.partitionState().MaxCommitSeq
	m := w.next()
	if !slices.Equal(snapshotIDs(t, m), []string{"t1"}) || m["maxCommitSeq"] != float64(seq) {
		t.Fatalf("after a tasks commit on the other server: %v (seq %d)", m, seq)
	}
	r := postOp(t, b.e2eEnv, "alice", command("job", "createTask", "r1",
		remotewire.Object{{Key: "id", Value: "t2"}, {Key: "project", Value: "p1"}, {Key: "title", Value: "cmd"}}))
	m = w.next()
	if !slices.Equal(snapshotIDs(t, m), []string{"t1", "t2"}) || m["maxCommitSeq"] != r.msg["commitSeq"] {
		t.Fatalf("after a command on the other server: %v (%v)", m, r.msg)
	}
}

// BenchmarkOperationQuery: one scoped query of 50 rows over real HTTP
// (sqlite), request encoding and response decoding included.
func BenchmarkOperationQuery(b *testing.B) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(b.TempDir(), "ops.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sc, _ := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title")).
		Scope("project:{project_id}").Compile()
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: sc, Authenticate: bearerAuth, RetentionInterval: -1,
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		},
		Operations: syncgo.Operations{Queries: []syncgo.Query{{ID: "q",
			SQL:     "SELECT id, title FROM tasks WHERE project_id = :project ORDER BY id",
			Params:  []syncgo.Param{{Name: "project", Type: wire.TypeString}},
			Columns: []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}, {Name: "title", Type: wire.TypeString}},
			MaxRows: 100,
			Coverage: func(p syncgo.Params) ([]syncgo.Coverage, error) {
				return []syncgo.Coverage{{Table: "tasks", Scopes: map[string][]string{"project_id": {p["project"].(string)}}}}, nil
			}}}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer srv.Stop(ctx)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c, err := sspclient.New(hs.URL, "alice", sc, sspclient.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		p := "p1"
		if i%2 == 1 {
			p = "p2"
		}
		if _, err := c.Upsert("tasks", map[string]any{"id": fmt.Sprintf("t%03d", i), "project_id": p, "title": "task"}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.SyncUntilQuiet(ctx, 10); err != nil {
		b.Fatal(err)
	}
	body, _ := remotewire.Encode(nil, query("bench", "q", project("p1")))
	b.ResetTimer()
	for b.Loop() {
		hr, _ := http.NewRequest(http.MethodPost, hs.URL+"/operations", bytes.NewReader(body))
		hr.Header.Set("Content-Type", remotewire.ContentType)
		hr.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v, err := remotewire.Decode(out)
		if err != nil {
			b.Fatal(err)
		}
		if rows, _ := v.(remotewire.Object).Get("rows"); len(rows.([]any)) != 50 {
			b.Fatalf("rows %v", rows)
		}
	}
}
