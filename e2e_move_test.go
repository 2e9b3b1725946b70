package syncgo_test

import (
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// A row that moves between two subscriptions of one client (deleted in one
// scope and inserted again, same id, in another: in one commit, or in two
// with an explicit insert, baseVersion 0, §6.2) reaches the client
// in two sections, each with the changes of its scope. Applied in section
// order, the old scope's delete would come after the new scope's insert;
// the delete's stored scopes name the incarnation it removes, so a client
// keeps the row. (Found by the fault suite: a client with one
// subscription per project lost such rows.)
func TestRowMovesBetweenSubscriptions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		e.allow("alice", map[string][]string{"project_id": {"*"}})
		e.allow("bob", map[string][]string{"project_id": {"*"}})
		alice := e.client("alice", sspclient.Options{})
		bob := e.client("bob", sspclient.Options{})
		mustSubscribe(t, bob, "sub-p0", "p0")
		mustSubscribe(t, bob, "sub-p1", "p1")
		mustUpsert(t, alice, taskRow("r", "p1", "in p1"))
		mustUpsert(t, alice, taskRow("s", "p1", "in p1"))
		syncQuiet(t, alice)
		syncQuiet(t, bob)

		if _, err := alice.Mutate(func(tx *sspclient.Tx) error {
			if err := tx.Delete("tasks", "r"); err != nil {
				return err
			}
			return tx.Upsert("tasks", taskRow("r", "p0", "r in p0"))
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Delete("tasks", "s"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, alice, taskRow("s", "p0", "s in p0"), sspclient.BaseVersion(0))
		syncQuiet(t, alice)
		syncQuiet(t, bob)

		want := e.serverRows("tasks")
		got := clientRows(t, bob, "tasks")
		if len(want) != 2 || len(got) != 2 || got["r"] != want["r"] || got["s"] != want["s"] {
			t.Fatalf("after the moves: bob holds %v; the server %v", got, want)
		}
	})
}
