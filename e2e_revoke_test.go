package syncgo_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Revocation purges rows (§3.3): the resolver drops project p2 for the
// actor; the next pull answers the p2 subscription revoked with
// sync.scope_revoked, the client purges its p2 rows (and keeps p1's), drops
// the outbox commit queued into p2 during that round, stops pulling the
// subscription, and its later pushes into p2 are sync.forbidden.
func TestE2ERevocationPurgesRows(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("admin", sspclient.Options{})
		for _, r := range []map[string]any{taskRow("a1", "p1", "a1"), taskRow("a2", "p1", "a2"),
			taskRow("b1", "p2", "b1"), taskRow("b2", "p2", "b2")} {
			mustUpsert(t, w, r)
		}
		syncQuiet(t, w)

		e.allow("alice", map[string][]string{"project_id": {"p1", "p2"}})
		var c *sspclient.Client
		var queued string
		revoking := false
		ht := newHookTransport(func(x *exchange) ([]byte, error) {
			if revoking && queued == "" { // queued after the request left: not in this round
				queued = mustUpsert(t, c, taskRow("b9", "p2", "queued during the revoking round"))
			}
			return nil, nil
		})
		c = e.client("alice", sspclient.Options{HTTPClient: ht.client()})
		mustSubscribe(t, c, "tasks-p1", "p1")
		mustSubscribe(t, c, "tasks-p2", "p2")
		syncQuiet(t, c)
		if n := len(c.Rows("tasks")); n != 4 {
			t.Fatalf("client holds %d rows, want 4", n)
		}

		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		revoking = true
		res, err := c.Sync(context.Background())
		revoking = false
		if err != nil {
			t.Fatal(err)
		}
		s2 := sectionOf(t, res, "tasks-p2")
		if s2.Status != wire.SubRevoked || s2.Reason != syncerr.CodeScopeRevoked || len(s2.Effective) != 0 {
			t.Fatalf("p2 section: status %s reason %q effective %v; want revoked, %s, empty",
				s2.Status, s2.Reason, s2.Effective, syncerr.CodeScopeRevoked)
		}
		if s1 := sectionOf(t, res, "tasks-p1"); s1.Status != wire.SubActive {
			t.Fatalf("p1 section: status %s, want active", s1.Status)
		}
		if s2.Purged != 2 {
			t.Fatalf("revocation purged %d rows, want 2", s2.Purged)
		}
		got := c.Rows("tasks")
		if _, ok := got["b1"]; ok || len(got) != 2 || got["a1"].ID == "" || got["a2"].ID == "" {
			t.Fatalf("after revocation the client holds %v; want exactly a1 and a2", sortedKeys(got))
		}
		if o, ok := c.Outcome(queued); !ok || o.Dropped != syncerr.CodeScopeRevoked || c.Pending() != 0 {
			t.Fatalf("commit queued into p2 during revocation: %+v (pending %d); want dropped locally", o, c.Pending())
		}

		insert := mustUpsert(t, c, taskRow("b3", "p2", "new row in a revoked project"))
		update := mustUpsert(t, c, map[string]any{"id": "b1", "title": "edit in a revoked project"})
		allowed := mustUpsert(t, c, taskRow("a3", "p1", "still allowed"))
		res, err = c.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{insert, update} {
			if o := pushed(t, res, id); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeForbidden {
				t.Fatalf("push into the revoked project: %s, want rejected %s", statusOf(o), syncerr.CodeForbidden)
			}
		}
		if o := pushed(t, res, allowed); o.Status != wire.PushApplied {
			t.Fatalf("push into p1: %s, want applied", statusOf(o))
		}
		for _, sec := range res.Sections {
			if sec.ID == "tasks-p2" {
				t.Fatal("the revoked subscription was pulled again")
			}
		}
		server := e.serverRows("tasks")
		if _, ok := server["b3"]; ok {
			t.Fatal("the forbidden insert reached the server")
		}
		if server["b1"] != e.renderTask(t, 1, taskRow("b1", "p2", "b1")) {
			t.Fatalf("the forbidden update changed b1: %s", server["b1"])
		}
		syncQuiet(t, c)
		if n := len(c.Rows("tasks")); n != 3 {
			t.Fatalf("client holds %d rows, want a1, a2, a3", n)
		}
	})
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// renderTask renders a tasks row at a version like serverRows does.
func (e *e2eEnv) renderTask(t *testing.T, version int64, values map[string]any) string {
	t.Helper()
	tbl, _ := e.schema.Table("tasks")
	vals := make([]wire.Value, len(tbl.Columns()))
	for i, col := range tbl.Columns() {
		v, err := sspclient.WireValue(col.Type, values[col.Name])
		if err != nil {
			t.Fatal(err)
		}
		vals[i] = v
	}
	return renderRow(t, tbl, version, vals)
}

// A failing resolver fails closed (§3.2 rule 5, §3.4): the subscription is
// revoked and purged, the push is forbidden, nothing is written. A
// resolver that returns a scope key no table declares fails the whole
// request with sync.invalid_subscription.
func TestE2EResolverFailureFailsClosed(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		c := e.client("alice", sspclient.Options{})
		mustSubscribe(t, c, "tasks-p1", "p1")
		mustUpsert(t, c, taskRow("t1", "p1", "before the outage"))
		syncQuiet(t, c)

		e.allow("alice", nil)
		id := mustUpsert(t, c, taskRow("t2", "p1", "during the outage"))
		res, err := c.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, id); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeForbidden {
			t.Fatalf("push during the outage: %s, want rejected %s", statusOf(o), syncerr.CodeForbidden)
		}
		if s := sectionOf(t, res, "tasks-p1"); s.Status != wire.SubRevoked || s.Reason != syncerr.CodeScopeRevoked || s.Purged != 1 {
			t.Fatalf("section during the outage: %+v; want revoked and purged", s)
		}
		if p := e.partitionState(); p.MaxCommitSeq != 1 {
			t.Fatalf("MaxCommitSeq %d, want 1", p.MaxCommitSeq)
		}

		e.allow("alice", map[string][]string{"project_id": {"p1"}, "undeclared": {"x"}})
		fresh := e.client("alice", sspclient.Options{})
		mustSubscribe(t, fresh, "tasks-p1", "p1")
		_, err = fresh.Sync(context.Background())
		wantHTTPError(t, "a resolver result with an undeclared key", http.StatusBadRequest, syncerr.CodeInvalidSubscription, err)
	})
}
