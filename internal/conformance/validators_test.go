package conformance

import (
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// installValidators and installCommitValidator over the control surface:
// each rule kind rejects with its code at the right operation, a cleared
// rule lets the same write through, and bad specs are refused.
func TestInstallValidatorsAndCommitValidator(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	id, mount := h.create()
	h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
	a := h.client(mount, "actor-a", "client-a")
	a.acquireEpoch()

	h.call(id, nil, "installValidators", []map[string]any{
		{"table": "tasks", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 3, "code": "app.too_long"}},
	})
	pr := a.push("c1", task("t1", "p1", "ok", nil), task("t2", "p1", "four", nil))
	if pr.Status != wire.PushRejected || pr.Results[0].OpIndex != 1 || pr.Results[0].Code != "app.too_long" {
		t.Fatalf("maxLength: %+v", pr)
	}
	// "é€" is two UTF-16 units, "😀😀" four: the length is JavaScript's.
	if pr := a.push("c2", task("t1", "p1", "é€", nil)); pr.Status != wire.PushApplied {
		t.Fatalf("two characters: %+v", pr)
	}
	if pr := a.push("c3", task("t3", "p1", "😀😀", nil)); pr.Status != wire.PushRejected {
		t.Fatalf("four UTF-16 units: %+v", pr)
	}

	h.call(id, nil, "installValidators", []map[string]any{
		{"table": "tasks", "rule": map[string]any{"kind": "immutableWhen", "column": "title", "guardColumn": "done",
			"guardValue": true, "code": "app.frozen"}},
	})
	if pr := a.push("c4", task("t1", "p1", "renamed", nil)); pr.Status != wire.PushRejected || pr.Results[0].Code != "app.frozen" {
		t.Fatalf("immutableWhen on a done row: %+v", pr)
	}
	if pr := a.push("c5", task("t1", "p1", "é€", []byte{1})); pr.Status != wire.PushApplied {
		t.Fatalf("immutableWhen, title unchanged: %+v", pr)
	}

	h.call(id, nil, "installValidators", []map[string]any{
		{"table": "tasks", "rule": map[string]any{"kind": "unexpectedError", "message": "secret"}},
	})
	pr = a.push("c6", task("t9", "p1", "x", nil))
	if pr.Status != wire.PushRejected || pr.Results[0].Code != "sync.constraint_violation" || strings.Contains(pr.Results[0].Message, "secret") {
		t.Fatalf("unexpectedError: %+v", pr)
	}
	h.call(id, nil, "installValidators", []any{})
	if pr := a.push("c7", task("t9", "p1", "a long title", nil)); pr.Status != wire.PushApplied {
		t.Fatalf("after clearing: %+v", pr)
	}

	h.call(id, nil, "installCommitValidator", map[string]any{"kind": "requireSiblingWhen", "table": "tasks",
		"column": "title", "equals": "audited", "siblingRowIdSuffix": "-audit", "code": "app.audit_required"})
	pr = a.push("c8", task("x1", "p1", "plain", nil), task("x2", "p1", "audited", nil))
	if pr.Status != wire.PushRejected || pr.Results[0].OpIndex != 1 || pr.Results[0].Code != "app.audit_required" {
		t.Fatalf("requireSiblingWhen without the sibling: %+v", pr)
	}
	if pr := a.push("c9", task("x2", "p1", "audited", nil), task("x2-audit", "p1", "log", nil)); pr.Status != wire.PushApplied {
		t.Fatalf("requireSiblingWhen with the sibling: %+v", pr)
	}
	h.call(id, nil, "installCommitValidator")
	if pr := a.push("c10", task("x3", "p1", "audited", nil)); pr.Status != wire.PushApplied {
		t.Fatalf("after clearing the commit validator: %+v", pr)
	}

	for _, bad := range []struct {
		method string
		arg    any
	}{
		{"installValidators", []map[string]any{{"table": "nope", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 1, "code": "a"}}}},
		{"installValidators", []map[string]any{{"table": "tasks", "rule": map[string]any{"kind": "nope"}}}},
		{"installValidators", []map[string]any{{"table": "tasks", "rule": map[string]any{"kind": "maxLength", "column": "title", "max": 1, "code": "sync.mine"}}}},
		{"installCommitValidator", map[string]any{"kind": "nope"}},
	} {
		if code, _ := h.callFails(id, bad.method, bad.arg); code != http.StatusBadRequest {
			t.Errorf("%s %v: %d, want 400", bad.method, bad.arg, code)
		}
	}
}
