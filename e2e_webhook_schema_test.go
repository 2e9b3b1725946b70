package syncgo_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/webhook"
	"github.com/syncgo/syncgo/wire"
)

// A webhook event and the schema: its row is the stored row in the
// layout of the server's schema when the commit was accepted (the
// current version, whatever older version of the window the pushing
// client speaks), and an event planned before an upgrade is delivered
// as planned, in the older layout (docs/reactions.md).
func TestE2EWebhookEventAcrossSchemaVersions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		v1 := e2eSchema(t, 1)
		v2, err := schema.New(2).
			Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
				schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null(), schema.Integer("priority").Null()).
			Scope("project:{project_id}").
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu  sync.Mutex
			got = map[string]map[string]any{} // task → the delivered row
		)
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var env struct {
				Event struct {
					Changes []struct {
						RowID string         `json:"row_id"`
						Row   map[string]any `json:"row"`
					} `json:"changes"`
				} `json:"event"`
			}
			if err := json.Unmarshal(b, &env); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range env.Event.Changes {
				got[c.RowID] = c.Row
			}
		}))
		defer rcv.Close()
		hooked := func(sc *schema.Compiled, workers int) func(*syncgo.Config) {
			return func(c *syncgo.Config) {
				planner, handlers, err := webhook.Reactions([]webhook.Hook{{Name: "task-events", URL: rcv.URL,
					Tables: []string{"tasks"}}}, sc, nil)
				if err != nil {
					t.Fatal(err)
				}
				c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers, Workers: workers})
			}
		}
		db := newReactionDB(t, d)
		// Version 1 plans an event and stops before delivering it.
		e1 := reactionServer(t, db, nil, hooked(v1, -1))
		c1 := e1.client("alice", sspclient.Options{})
		syncQuiet(t, c1)
		if o := pushTasks(t, c1, "p1", []string{"t0"}, []string{"before"}); o.Status != wire.PushApplied {
			t.Fatalf("push on version 1: %s", statusOf(o))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e1.srv.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// Version 2 (version 1 in its window) delivers.
		e := reactionServer(t, db, nil, func(c *syncgo.Config) {
			c.Schema, c.SchemaWindow = v2, []*schema.Compiled{v1}
			hooked(v2, 0)(c)
		})
		old, err := sspclient.New(e.url, "alice", v1, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cur, err := sspclient.New(e.url, "bob", v2, sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, old)
		syncQuiet(t, cur)
		r := taskRow("t2", "p1", "new")
		r["priority"] = 5
		if _, err := cur.Upsert("tasks", r); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, cur)
		if o := pushTasks(t, old, "p1", []string{"t1"}, []string{"old client"}); o.Status != wire.PushApplied {
			t.Fatalf("push of a version 1 client: %s", statusOf(o))
		}
		waitFor(t, 20*time.Second, "three events delivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 3
		})
		mu.Lock()
		defer mu.Unlock()
		if _, ok := got["t0"]["priority"]; ok || got["t0"]["title"] != "before" {
			t.Errorf("the event planned on version 1 was delivered with %v; want its planned row, without the later column", got["t0"])
		}
		if p, ok := got["t1"]["priority"]; !ok || p != nil {
			t.Errorf("the event of a version 1 client's insert: %v; want the stored row of version 2 (priority null)", got["t1"])
		}
		if got["t2"]["priority"] != float64(5) {
			t.Errorf("the event of a version 2 client's insert: %v", got["t2"])
		}
	})
}
