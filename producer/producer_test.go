package producer_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/producer"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The producer against a syncgo server over real HTTP, on both drivers.

const partition = "tenant"

func testSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("meta").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type env struct {
	store  store.Store
	schema *schema.Compiled
	url    string
}

// newEnv serves a fresh store: the bearer token is the actor; "svc" may
// write every project, "bob" only p1.
func newEnv(t *testing.T, driver string) *env {
	t.Helper()
	var st store.Store
	var err error
	if driver == "sqlite" {
		st, err = sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "p.db")})
	} else {
		st, err = pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.Schema(t, "producer", false), MaxConns: 4})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := &env{store: st, schema: testSchema(t)}
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: e.schema,
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || tok == "" {
				return syncgo.Auth{}, errors.New("no token")
			}
			return syncgo.Auth{ActorID: tok, Partition: partition}, nil
		},
		ResolveScopes: func(_ context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
			if q.ActorID == "bob" {
				return map[string][]string{"project_id": {"p1"}}, nil
			}
			return map[string][]string{"project_id": {"*"}}, nil
		}, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Stop(context.Background())
	})
	e.url = hs.URL
	return e
}

func (e *env) producer(t *testing.T, actor string, client *http.Client) *producer.Producer {
	t.Helper()
	p, err := producer.New(producer.Config{URL: e.url + "/", Schema: e.schema, ClientID: "svc-" + actor, HTTPClient: client,
		Token: func(context.Context) (string, error) { return actor, nil }, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// row returns the stored row's values by column, or nil.
func (e *env) row(t *testing.T, id string) map[string]any {
	t.Helper()
	tbl, _ := e.schema.Table("tasks")
	rows, err := e.store.ListRows(context.Background(), partition, "tasks", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.RowID == id {
			vals, err := tbl.RowCodec().DecodeRow(r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]any{}
			for i, c := range tbl.Columns() {
				out[c.Name] = wire.GoValue(c.Type, vals[i])
			}
			return out
		}
	}
	return nil
}

func (e *env) head(t *testing.T) int64 {
	t.Helper()
	p, err := e.store.Partition(context.Background(), partition)
	if err != nil {
		t.Fatal(err)
	}
	return p.MaxCommitSeq
}

// dropFirst is a transport that delivers the first request to the server
// and loses its response, as a network failure would.
type dropFirst struct{ n atomic.Int32 }

func (d *dropFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Header.Get("Content-Type") == producer.ContentType && d.n.Add(1) == 2 { // the first push (after the epoch)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset (simulated)")
	}
	return resp, err
}

// unavailableFirst answers the first push 503 with a Retry-After, without
// sending it on.
type unavailableFirst struct{ n atomic.Int32 }

func (u *unavailableFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if u.n.Add(1) == 2 {
		return &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"code":"sync.unavailable","message":"busy","retryable":true}`)), Request: r}, nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestProducer(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			e := newEnv(t, driver)
			ctx := context.Background()
			svc := e.producer(t, "svc", nil)

			res, err := svc.Push(ctx, "create-t1", producer.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p2",
				"title": "milk", "done": false, "rank": 3, "meta": map[string]any{"k": []int{1}}}))
			if err != nil || res.Status != wire.PushApplied || res.CommitSeq < 1 {
				t.Fatalf("push: %+v %v", res, err)
			}
			if r := e.row(t, "t1"); r["title"] != "milk" || r["rank"] != int64(3) || r["meta"] != `{"k":[1]}` {
				t.Fatalf("stored row %v", r)
			}
			// The same commit again: its recorded result.
			again, err := svc.Push(ctx, "create-t1", producer.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p2",
				"title": "milk", "done": false, "rank": 3, "meta": map[string]any{"k": []int{1}}}))
			if err != nil || again.Status != wire.PushCached || again.CommitSeq != res.CommitSeq {
				t.Fatalf("replay: %+v %v; want cached at %d", again, err, res.CommitSeq)
			}

			// A lost response: retried with the same bytes, applied once.
			lossy := e.producer(t, "svc", &http.Client{Transport: &dropFirst{}})
			before := e.head(t)
			res, err = lossy.Push(ctx, "rename-t1", producer.Upsert("tasks", map[string]any{"id": "t1", "title": "oat milk"}))
			if err != nil || res.Status != wire.PushCached || res.CommitSeq != before+1 || e.head(t) != before+1 {
				t.Fatalf("after a lost response: %+v %v (head %d -> %d); want cached at %d, one commit", res, err, before, e.head(t), before+1)
			}
			if r := e.row(t, "t1"); r["title"] != "oat milk" || r["project_id"] != "p2" {
				t.Fatalf("partial update: %v", r)
			}

			// 503 with Retry-After: waited for, then applied.
			busy := e.producer(t, "svc", &http.Client{Transport: &unavailableFirst{}})
			if res, err = busy.Push(ctx, "create-t2", producer.Upsert("tasks", map[string]any{"id": "t2", "project_id": "p1",
				"title": "eggs", "done": true, "rank": nil, "meta": nil})); err != nil || res.Status != wire.PushApplied {
				t.Fatalf("after a 503: %+v %v", res, err)
			}

			// Rejections are results: a scope bob may not write, a
			// version that is not the row's.
			bob := e.producer(t, "bob", nil)
			res, err = bob.Push(ctx, "bob-1", producer.Upsert("tasks", map[string]any{"id": "b1", "project_id": "p2",
				"title": "x", "done": false, "rank": nil, "meta": nil}))
			if err != nil || res.Status != wire.PushRejected || len(res.Results) != 1 || res.Results[0].Code != "sync.forbidden" {
				t.Fatalf("forbidden scope: %+v %v", res, err)
			}
			res, err = svc.Push(ctx, "cas-t2", producer.Upsert("tasks", map[string]any{"id": "t2", "title": "late"}).IfVersion(0))
			if err != nil || res.Status != wire.PushRejected || res.Results[0].Status != wire.OpConflict || res.Results[0].ServerVersion < 1 {
				t.Fatalf("stale version: %+v %v", res, err)
			}

			// A delete.
			if res, err = svc.Push(ctx, "delete-t2", producer.Delete("tasks", "t2")); err != nil || res.Status != wire.PushApplied || e.row(t, "t2") != nil {
				t.Fatalf("delete: %+v %v", res, err)
			}

			// Refusals that no retry can fix come back at once: a
			// missing token is asked for once more, then refused.
			var asked atomic.Int32
			anon, _ := producer.New(producer.Config{URL: e.url, Schema: e.schema, ClientID: "anon",
				Token: func(context.Context) (string, error) { asked.Add(1); return "", nil }})
			_, err = anon.Push(ctx, "x", producer.Delete("tasks", "t1"))
			var pe *producer.Error
			if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized || pe.Code != "sync.auth_required" || asked.Load() != 2 {
				t.Fatalf("no token: %v (token asked %d times; want 2)", err, asked.Load())
			}
			if _, err := svc.Push(ctx, "bad", producer.Upsert("tasks", map[string]any{"id": "t9", "nope": 1})); err == nil || !strings.Contains(err.Error(), `no column "nope"`) {
				t.Fatalf("unknown column: %v", err)
			}

			// A schema version the server does not serve: refused at once.
			newer, err := schema.New(9).Table("tasks", "id", schema.String("id")).Scope("project:{id}").Compile()
			if err != nil {
				t.Fatal(err)
			}
			ahead, _ := producer.New(producer.Config{URL: e.url, Schema: newer, ClientID: "ahead", MaxAttempts: 3,
				Token: func(context.Context) (string, error) { return "svc", nil }})
			_, err = ahead.Push(ctx, "x", producer.Delete("tasks", "t1"))
			if !errors.As(err, &pe) || pe.Code != "producer.schema_unsupported" {
				t.Fatalf("a producer of schema version 9: %v; want producer.schema_unsupported", err)
			}

			// A restored log (a new epoch): the producer takes the new
			// epoch and sends the commit under it.
			if err := e.store.RotateLogEpoch(ctx, partition, "epoch-restored", time.Now().UnixMilli()); err != nil {
				t.Fatal(err)
			}
			if res, err = svc.Push(ctx, "after-restore", producer.Delete("tasks", "t1")); err != nil || res.Status != wire.PushApplied {
				t.Fatalf("after an epoch rotation: %+v %v", res, err)
			}
		})
	}
}
