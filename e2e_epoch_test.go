package syncgo_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// A log epoch rotation (a restore, §2.1) resets the replica: the client's
// next round is answered resetRequired with the new epoch and nothing
// else; it discards its synced rows and cursors, keeps its outbox, and
// the same Sync replays the outbox under the new epoch and re-bootstraps.
// A wire-version-1 client, which cannot present an epoch, is refused from
// then on.
func TestE2EEpochRotationResetsReplica(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		c := e.client("alice", sspclient.Options{})
		v1 := e.client("alice", sspclient.Options{WireVersion: wire.Version1})
		mustSubscribe(t, c, "tasks-p1", "p1")
		mustSubscribe(t, v1, "tasks-p1", "p1")
		mustUpsert(t, c, taskRow("t1", "p1", "before the restore"))
		mustUpsert(t, c, taskRow("t2", "p1", "before the restore"))
		syncQuiet(t, c)
		syncQuiet(t, v1)
		old, _ := c.LogEpoch()
		byRef := e.client("carol", sspclient.Options{Accept: wire.AcceptExternalRows})
		mustSubscribe(t, byRef, "tasks-p1", "p1")
		var ref wire.SegmentRef
		for _, res := range syncQuiet(t, byRef) {
			for _, s := range res.Sections {
				if len(s.Refs) > 0 {
					ref = s.Refs[0]
				}
			}
		}
		if ref.SegmentID == "" {
			t.Fatal("no segment served by reference before the rotation")
		}

		// The restore procedure rotates the epoch (the rows stay as they
		// are here; a real restore would also rewind them).
		if err := e.store.RotateLogEpoch(context.Background(), e2ePartition, "epoch-after-restore", time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		pending := mustUpsert(t, c, taskRow("t3", "p1", "written offline across the restore"))

		first, err := c.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !first.ResetRequired || !first.EpochChanged || first.LogEpoch != "epoch-after-restore" || len(first.Pushed) != 0 || len(first.Sections) != 0 {
			t.Fatalf("first round after the rotation: %+v; want only a reset to the new epoch", first)
		}
		if ep, _ := c.LogEpoch(); ep == old || len(c.Rows("tasks")) != 0 || c.Pending() != 1 {
			t.Fatalf("after the reset: epoch %q (old %q), %d rows, %d pending; want the new epoch, no rows, the outbox kept",
				ep, old, len(c.Rows("tasks")), c.Pending())
		}
		if st, _ := c.Subscription("tasks-p1"); st.Cursor != -1 || st.Effective != nil {
			t.Fatalf("after the reset the subscription kept cursor %d effective %v", st.Cursor, st.Effective)
		}

		syncQuiet(t, c)
		if o, ok := c.Outcome(pending); !ok || o.Status != wire.PushApplied {
			t.Fatalf("the outbox commit after the reset: %+v, want applied under the new epoch", o)
		}
		sameRows(t, "client vs server after the reset", clientRows(t, c, "tasks"), e.serverRows("tasks"))

		wantHTTPError(t, "a segment published under the old epoch", http.StatusNotFound, syncerr.CodeNotFound,
			dl(byRef, ref.SegmentID, map[string][]string{"project_id": {"p1"}}))

		_, err = v1.Sync(context.Background())
		wantHTTPError(t, "wire version 1 after the rotation", http.StatusBadRequest, syncerr.CodeClientWireUnsupported, err)
	})
}
