package syncgo_test

import (
	"encoding/json"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// Every valid JSON document is a json column's value (§2.4), also those
// that Postgres's jsonb refuses (a lone surrogate's escape, a number
// outside numeric's range): the commit applies on both drivers, and a
// client bootstrapping the rows gets them verbatim. On Postgres the row's
// typed jsonb column holds NULL for them. Before, the typed column's cast
// failed the commit with a retryable sync.internal_error, and with it the
// commits grouped in the same transaction, on every retry.
func TestE2EJSONValuesPostgresCannotHold(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		e.allow("bob", map[string][]string{"project_id": {"p1"}})
		alice := e.client("alice", sspclient.Options{})
		values := map[string]string{
			"lone-high": `"\ud800"`, "lone-low": `["x","\udc00"]`, "huge": `1e999999`,
			"tiny": `{"a":1e-999999}`, "pair": `"\ud83d\ude00"`, "fine": `{"b":[1,2]}`,
		}
		ids := map[string]string{}
		for id, v := range values {
			row := taskRow(id, "p1", id)
			row["notes"] = json.RawMessage(v)
			ids[id] = mustUpsert(t, alice, row)
		}
		syncQuiet(t, alice)
		for id, cid := range ids {
			if o, ok := alice.Outcome(cid); !ok || o.Status != wire.PushApplied {
				t.Errorf("row %s (notes %s): %s; want applied", id, values[id], statusOf(o))
			}
		}
		bob := e.client("bob", sspclient.Options{})
		if err := bob.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, bob)
		tasks, _ := e.schema.Table("tasks")
		for id, v := range values {
			r, ok := bob.Row("tasks", id)
			if !ok {
				t.Errorf("bob has no row %s", id)
				continue
			}
			if got := r.Map(tasks)["notes"]; got != v {
				t.Errorf("row %s: notes %v; want %s verbatim", id, got, v)
			}
		}
	})
}
