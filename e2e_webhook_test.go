package syncgo_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/webhook"
	"github.com/syncgo/syncgo/wire"
)

// Webhooks of a Go host (package webhook on durable reactions) end to end.

// A commit whose change list alone (rows omitted) passes a reaction's
// payload bound is still accepted and still plans its event: a webhook on
// a table must not make a large, valid commit unpushable (docs/reactions.md:
// "An event whose rows would pass 60 KiB is planned without them").
func TestE2EWebhookLargeCommitIsPlanned(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := reactionServer(t, newReactionDB(t, d), nil, func(c *syncgo.Config) {
			planner, handlers, err := webhook.Reactions([]webhook.Hook{{Name: "task-events", URL: "http://127.0.0.1:1/hook",
				Tables: []string{"tasks"}}}, c.Schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Plan only: no runner, so nothing is delivered.
			c.Reactions = fastReactions(&syncgo.ReactionConfig{Planner: planner, Handlers: handlers, Workers: -1})
		})
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		// 500 operations (the default MaxOperationsPerRequest) with ids of
		// 120 bytes: about 80 KiB of changes even without their rows.
		ids, titles := make([]string, 500), make([]string, 500)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%04d", strings.Repeat("t", 115), i)
			titles[i] = "x"
		}
		if o := pushTasks(t, c, "p1", ids, titles); o.Status != wire.PushApplied {
			t.Fatalf("push of 500 tasks on a hooked table: %s", statusOf(o))
		}
		rs := reactionsIn(t, e.srv, store.ReactionQuery{})
		if len(rs) != 1 || rs[0].Type != "task-events" || len(rs[0].Payload) > reaction.MaxPayloadBytes {
			t.Fatalf("%d reactions planned; want one task-events event within the payload bound", len(rs))
		}
		var ev struct {
			Changes        []map[string]any `json:"changes"`
			RowsOmitted    bool             `json:"rows_omitted"`
			ChangesOmitted int              `json:"changes_omitted"`
		}
		if err := json.Unmarshal(rs[0].Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if !ev.RowsOmitted || len(ev.Changes) == 0 || len(ev.Changes)+ev.ChangesOmitted != len(ids) ||
			ev.Changes[0]["row_id"] != ids[0] {
			t.Errorf("event: rows omitted %v, %d changes listed, %d omitted; want the first changes listed and the rest counted",
				ev.RowsOmitted, len(ev.Changes), ev.ChangesOmitted)
		}
	})
}
