package syncgo_test

import (
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// Two clients converge: A's writes reach B, B's writes (a sparse update, a
// delete, an insert) reach A, and both replicas equal the server's rows.
func TestE2ETwoClientsConverge(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		a := e.client("alice", sspclient.Options{})
		b := e.client("bob", sspclient.Options{AcceptEncoding: "gzip"})
		mustSubscribe(t, a, "tasks-p1", "p1")
		mustSubscribe(t, b, "tasks-p1", "p1")
		syncQuiet(t, a)
		syncQuiet(t, b)
		if epochA, ok := a.LogEpoch(); !ok || epochA != e.partitionState().LogEpoch {
			t.Fatalf("client A epoch = %q, %v; want the partition's %q", epochA, ok, e.partitionState().LogEpoch)
		}

		c1 := mustUpsert(t, a, taskRow("t1", "p1", "first"))
		c2 := mustUpsert(t, a, taskRow("t2", "p1", "second"))
		mustUpsert(t, a, taskRow("x1", "p2", "outside B's subscription"))
		syncQuiet(t, a)
		for _, id := range []string{c1, c2} {
			if o, ok := a.Outcome(id); !ok || o.Status != wire.PushApplied {
				t.Fatalf("commit %s: outcome %+v, want applied", id, o)
			}
		}
		syncQuiet(t, b)
		if got := len(b.Rows("tasks")); got != 2 {
			t.Fatalf("B holds %d rows after pulling, want 2 (t1, t2; x1 is in p2)", got)
		}

		mustUpsert(t, b, map[string]any{"id": "t1", "title": "edited by B"}) // sparse: title only
		if _, err := b.Delete("tasks", "t2"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, b, taskRow("t3", "p1", "third"))
		syncQuiet(t, b)
		syncQuiet(t, a)

		server := e.serverRows("tasks")
		delete(server, "x1")
		sameRows(t, "A vs server (p1)", clientRowsIn(t, a, "p1"), server)
		sameRows(t, "B vs server", clientRows(t, b, "tasks"), server)
		r, ok := a.Row("tasks", "t1")
		if !ok {
			t.Fatal("A lost t1")
		}
		tbl, _ := e.schema.Table("tasks")
		if m := r.Map(tbl); r.Version != 2 || m["title"] != "edited by B" || m["done"] != false {
			t.Fatalf("A's t1 = v%d %v; want v2, title edited by B, done false kept", r.Version, m)
		}
		if _, ok := a.Row("tasks", "t2"); ok {
			t.Fatal("A still holds t2, deleted by B")
		}
	})
}

// clientRowsIn is clientRows restricted to one project.
func clientRowsIn(t *testing.T, c *sspclient.Client, project string) map[string]string {
	t.Helper()
	tbl, _ := c.Schema().Table("tasks")
	out := clientRows(t, c, "tasks")
	for id, r := range c.Rows("tasks") {
		if r.Map(tbl)["project_id"] != project {
			delete(out, id)
		}
	}
	return out
}
