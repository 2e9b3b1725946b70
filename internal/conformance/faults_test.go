package conformance

import (
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// TestIdempotencyFault drives idempotency-fault as the catalog does: the
// faulted push is a retryable serving failure that applies nothing, and
// the identical retry applies.
func TestIdempotencyFault(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		h.call(id, nil, "failNextIdempotencyLookup")
		pr := a.push("m1", task("t1", "p1", "later", nil))
		if pr.Status != wire.PushRejected || len(pr.Results) != 1 || pr.Results[0].Code != "sync.idempotency_cache_miss" || !pr.Results[0].Retryable {
			t.Fatalf("faulted push: %+v, want rejected with a retryable sync.idempotency_cache_miss", pr)
		}
		var maxSeq int64
		h.call(id, &maxSeq, "getMaxCommitSeq")
		if maxSeq != 0 {
			t.Fatalf("getMaxCommitSeq after the cache miss = %d, want 0", maxSeq)
		}
		if pr := a.push("m1", task("t1", "p1", "later", nil)); pr.Status != wire.PushApplied || pr.CommitSeq != 1 {
			t.Fatalf("retry: %+v, want applied at 1", pr)
		}
		if pr := a.push("m1", task("t1", "p1", "later", nil)); pr.Status != wire.PushCached || pr.CommitSeq != 1 {
			t.Fatalf("replay: %+v, want cached at 1", pr)
		}
	})
}

// TestBackupRestore follows the catalog's backup-restore scenario: rows
// written after the capture are lost, the epoch rotates so the ahead
// client resets, and its preserved outbox applies once on the new epoch.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		if code, msg := h.callFails(id, "restoreBackup"); code != http.StatusConflict || !strings.Contains(msg, "captureBackup") {
			t.Errorf("restore without a backup: %d %q, want 409", code, msg)
		}
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		a.push("c1", task("before", "p1", "in backup", nil))
		cursor := a.pull(-1).nextCursor
		oldEpoch := *a.epoch

		h.call(id, nil, "captureBackup")
		a.push("c2", task("lost", "p1", "after backup", nil))
		cursor = a.pull(cursor).nextCursor
		h.call(id, nil, "restoreBackup")

		frames := a.roundTrip(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{{ID: "tasks", Table: "tasks", Cursor: cursor,
				Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}})
		hdr, ok := frames[0].(*wire.RespHeader)
		if !ok || !hdr.ResetRequired || hdr.LogEpoch == oldEpoch || len(frames) != 1 {
			t.Fatalf("pull on the old epoch: %+v (%d frames), want a header-only reset to a new epoch", frames[0], len(frames))
		}
		if got := readRowIDs(h, id); got != "before" {
			t.Errorf("rows after restore = %s, want before", got)
		}
		var maxSeq int64
		h.call(id, &maxSeq, "getMaxCommitSeq")
		if maxSeq != 1 {
			t.Errorf("getMaxCommitSeq after restore = %d, want 1", maxSeq)
		}

		// The client re-bootstraps on the new epoch and replays its outbox.
		if s := a.pull(-1); s.start.Status != wire.SubActive || s.rows != 1 {
			t.Errorf("re-bootstrap: %v with %d rows, want active with 1", s.start.Status, s.rows)
		}
		if pr := a.push("c3", task("offline", "p1", "preserved outbox", nil)); pr.Status != wire.PushApplied || pr.CommitSeq != 2 {
			t.Fatalf("outbox push on the new epoch: %+v, want applied at 2", pr)
		}
		if got := readRowIDs(h, id); got != "before,offline" {
			t.Errorf("rows = %s, want before,offline", got)
		}

		// A second restore of the same backup works too.
		h.call(id, nil, "restoreBackup")
		if got := readRowIDs(h, id); got != "before" {
			t.Errorf("rows after the second restore = %s, want before", got)
		}
	})
}

func readRowIDs(h *harness, id string) string {
	h.t.Helper()
	var rows []struct{ RowID string }
	h.call(id, &rows, "readRows", "tasks")
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.RowID
	}
	return strings.Join(ids, ",")
}
