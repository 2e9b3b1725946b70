package syncgo_test

import (
	"context"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
)

// A versioned upsert of an absent row is authorized before the row's
// absence is told (§3.4 before §6.2): an actor without the payload's scope,
// or whose partial payload omits the scope column, gets sync.forbidden,
// never sync.row_missing; an actor with the scope learns that the row is
// missing. A negative baseVersion is not 0, so it names an update too
// (§10: sync.row_missing is an upsert with baseVersion ≠ 0 on an absent
// row): it never creates the row.
func TestE2EAuthorizeBeforeRowMissing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		c := e.client("alice", sspclient.Options{})
		for _, tc := range []struct {
			name   string
			values map[string]any
			base   int64
			want   string
		}{
			{"partial, foreign scope", map[string]any{"id": "ghost", "project_id": "p2", "title": "x"}, 3, syncerr.CodeForbidden},
			{"partial, no scope column", map[string]any{"id": "ghost", "title": "x"}, 3, syncerr.CodeForbidden},
			{"full, foreign scope", taskRow("ghost", "p2", "x"), 3, syncerr.CodeForbidden},
			{"partial, own scope", map[string]any{"id": "ghost", "project_id": "p1", "title": "x"}, 3, syncerr.CodeRowMissing},
			{"full, own scope", taskRow("ghost", "p1", "x"), 3, syncerr.CodeRowMissing},
			{"full, foreign scope, negative baseVersion", taskRow("ghost", "p2", "x"), -1, syncerr.CodeForbidden},
			{"full, own scope, negative baseVersion", taskRow("ghost", "p1", "x"), -1, syncerr.CodeRowMissing},
		} {
			id := mustUpsert(t, c, tc.values, sspclient.BaseVersion(tc.base))
			res, err := c.Sync(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := pushed(t, res, id).ErrorCode(); got != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
			}
		}
		if rows := e.serverRows("tasks"); len(rows) != 0 {
			t.Errorf("the table holds %v; no upsert should have created a row", rows)
		}
	})
}
