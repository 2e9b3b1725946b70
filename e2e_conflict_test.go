package syncgo_test

import (
	"context"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// conflictSetup returns two clients, A at wire version 3 and B at
// version bv, both holding task t1 at version 1, and A's title edit applied
// on top with baseVersion 1 (the server row is at version 2).
func conflictSetup(t *testing.T, e *e2eEnv, bv uint16) (a, b *sspclient.Client) {
	t.Helper()
	a = e.client("alice", sspclient.Options{})
	b = e.client("bob", sspclient.Options{WireVersion: bv})
	mustSubscribe(t, a, "tasks-p1", "p1")
	mustSubscribe(t, b, "tasks-p1", "p1")
	mustUpsert(t, a, taskRow("t1", "p1", "original"))
	syncQuiet(t, a)
	syncQuiet(t, b)
	if r, ok := b.Row("tasks", "t1"); !ok || r.Version != 1 {
		t.Fatalf("B's t1 = %+v, %v; want version 1", r, ok)
	}
	id := mustUpsert(t, a, map[string]any{"id": "t1", "title": "A's title"}, sspclient.Versioned())
	syncQuiet(t, a)
	if o, _ := a.Outcome(id); o.Status != wire.PushApplied {
		t.Fatalf("A's versioned edit: %s, want applied", statusOf(o))
	}
	return a, b
}

// A conflict and its resolution at wire version 3: B edits the column A
// edited with the stale baseVersion and loses with serverVersion, serverRow
// and conflictColumns marking exactly that column; B's edit of another
// column with the same stale base applies (column-level versions); B then
// re-bases on serverVersion and wins, and both replicas converge.
func TestE2EConflictAndResolution(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		a, b := conflictSetup(t, e, wire.Version3)

		lose := mustUpsert(t, b, map[string]any{"id": "t1", "title": "B's title"}, sspclient.Versioned())
		other := mustUpsert(t, b, map[string]any{"id": "t1", "done": true}, sspclient.BaseVersion(1))
		res, err := b.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		o := pushed(t, res, lose)
		cf, ok := o.Conflict()
		if o.Status != wire.PushRejected || !ok {
			t.Fatalf("B's stale title edit: %s, want rejected with a conflict", statusOf(o))
		}
		if cf.Code != syncerr.CodeVersionConflict || cf.ServerVersion != 2 {
			t.Fatalf("conflict record code %q serverVersion %d; want %s, 2", cf.Code, cf.ServerVersion, syncerr.CodeVersionConflict)
		}
		if got := decodeRow(t, b, "tasks", cf.ServerRow); got["title"] != "A's title" {
			t.Fatalf("serverRow = %v, want A's title", got)
		}
		if cols := columnBits(t, b, "tasks", cf.ConflictColumns); !slices.Equal(cols, []string{"title"}) {
			t.Fatalf("conflictColumns mark %v, want exactly [title]", cols)
		}
		if o := pushed(t, res, other); o.Status != wire.PushApplied {
			t.Fatalf("B's edit of an uncontended column with the stale base: %s, want applied", statusOf(o))
		}

		win := mustUpsert(t, b, map[string]any{"id": "t1", "title": "B's title"}, sspclient.BaseVersion(cf.ServerVersion))
		syncQuiet(t, b)
		if o, _ := b.Outcome(win); o.Status != wire.PushApplied {
			t.Fatalf("B's re-based edit: %s, want applied", statusOf(o))
		}
		syncQuiet(t, a)
		server := e.serverRows("tasks")
		sameRows(t, "A vs server", clientRows(t, a, "tasks"), server)
		sameRows(t, "B vs server", clientRows(t, b, "tasks"), server)
		tbl, _ := e.schema.Table("tasks")
		if r, _ := a.Row("tasks", "t1"); r.Map(tbl)["title"] != "B's title" || r.Map(tbl)["done"] != true || r.Version != 4 {
			t.Fatalf("converged t1 = v%d %v; want v4 with B's title and done", r.Version, r.Map(tbl))
		}
	})
}

// A wire-version-2 client gets the version 2 conflict record (no
// conflictColumns) and row-level semantics: its edit of a column A did not
// touch still conflicts, because the row's version moved. Re-based on
// serverVersion it applies.
func TestE2EConflictWireVersion2(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		a, b := conflictSetup(t, e, wire.Version2)

		lose := mustUpsert(t, b, map[string]any{"id": "t1", "done": true}, sspclient.Versioned())
		res, err := b.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		o := pushed(t, res, lose)
		cf, ok := o.Conflict()
		if o.Status != wire.PushRejected || !ok {
			t.Fatalf("v2 edit of an untouched column with a stale base: %s, want a row-level conflict", statusOf(o))
		}
		if cf.ServerVersion != 2 || len(cf.ConflictColumns) != 0 {
			t.Fatalf("v2 conflict record: serverVersion %d, conflictColumns %x; want 2 and none", cf.ServerVersion, cf.ConflictColumns)
		}
		if got := decodeRow(t, b, "tasks", cf.ServerRow); got["title"] != "A's title" {
			t.Fatalf("serverRow = %v, want A's title", got)
		}

		// The same round pulled t1 at version 2: re-base on it.
		win := mustUpsert(t, b, map[string]any{"id": "t1", "done": true}, sspclient.BaseVersion(cf.ServerVersion))
		syncQuiet(t, b)
		if o, _ := b.Outcome(win); o.Status != wire.PushApplied {
			t.Fatalf("v2 re-based edit: %s, want applied", statusOf(o))
		}
		syncQuiet(t, a)
		server := e.serverRows("tasks")
		sameRows(t, "A vs server", clientRows(t, a, "tasks"), server)
		sameRows(t, "B vs server", clientRows(t, b, "tasks"), server)
		tbl, _ := e.schema.Table("tasks")
		if r, _ := a.Row("tasks", "t1"); r.Map(tbl)["title"] != "A's title" || r.Map(tbl)["done"] != true {
			t.Fatalf("converged t1 = %v; want A's title kept and done set", r.Map(tbl))
		}
	})
}
