package conformance

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// tested are the capabilities whose control calls the tests below drive
// end to end; info must advertise no other.
var tested = []string{"backup-restore", "blob-presign", "blobs", "crdt", "idempotency-fault", "validators", "commit-validators", "leases", "signed-urls"}

func TestInfoAdvertisesOnlyTestedCapabilities(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	var info struct {
		Name         string   `json:"name"`
		Capabilities []string `json:"capabilities"`
	}
	if code := h.do("GET", "/__conformance/info", nil, &info); code != http.StatusOK {
		t.Fatalf("info: %d", code)
	}
	if info.Name != "syncgo" {
		t.Errorf("name = %q, want syncgo", info.Name)
	}
	for _, c := range info.Capabilities {
		if !slices.Contains(tested, c) {
			t.Errorf("capability %q is advertised but not tested end to end", c)
		}
	}
	if info.Capabilities == nil {
		t.Error("capabilities must be a JSON list, even when empty")
	}
	// The calls of unadvertised capabilities answer 501, not a silent null.
	id, _ := h.create()
	for method, capability := range unimplemented {
		if slices.Contains(info.Capabilities, capability) {
			t.Errorf("%s: capability %q is advertised but its call is unimplemented", method, capability)
		}
		if code, _ := h.callFails(id, method); code != http.StatusNotImplemented {
			t.Errorf("%s: status %d, want 501", method, code)
		}
	}
	if code, msg := h.callFails(id, "noSuchMethod"); code != http.StatusBadRequest || !strings.Contains(msg, "unknown method") {
		t.Errorf("unknown method: %d %q", code, msg)
	}
}

func TestCreateRefusesBadRequests(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"no schema", map[string]any{"partition": "p"}, "schema is required"},
		{"shape", map[string]any{"partition": "p", "schema": map[string]any{"version": 1, "tables": []any{map[string]any{"name": "t"}}}}, "primaryKey"},
		{"meaning", map[string]any{"partition": "p", "schema": json.RawMessage(strings.Replace(testSchema, `"primaryKey": "id"`, `"primaryKey": "nope"`, 1))}, "nope"},
		{"no partition", map[string]any{"schema": json.RawMessage(testSchema)}, "partition is required"},
	} {
		var out struct{ Error string }
		code := h.do("POST", "/__conformance/instances", tc.body, &out)
		if code != http.StatusBadRequest || !strings.Contains(out.Error, tc.want) {
			t.Errorf("%s: %d %q, want 400 mentioning %q", tc.name, code, out.Error, tc.want)
		}
	}
}

func TestPushThroughMountAndReadRows(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		if mount != "/i/"+id {
			t.Fatalf("mount = %q, want /i/%s", mount, id)
		}
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		if pr := a.push("c1", task("t1", "p1", "hello", []byte{0x00, 0xAB, 0xff})); pr.Status != wire.PushApplied || pr.CommitSeq != 1 {
			t.Fatalf("push: %+v", pr)
		}
		var rows []map[string]any
		h.call(id, &rows, "readRows", "tasks")
		want := []map[string]any{{"rowId": "t1", "version": 1.0,
			"values": map[string]any{"id": "t1", "project_id": "p1", "title": "hello", "body": map[string]any{"$bytes": "00abff"},
				"meta": `{"k":[1,2]}`, "n": 42.0, "done": true},
			"scopes": map[string]any{"project_id": "p1"}}}
		if got, _ := json.Marshal(rows); string(got) != mustJSON(t, want) {
			t.Errorf("readRows = %s\nwant        %s", got, mustJSON(t, want))
		}
		var maxSeq int64
		h.call(id, &maxSeq, "getMaxCommitSeq")
		if maxSeq != 1 {
			t.Errorf("getMaxCommitSeq = %d, want 1", maxSeq)
		}
		if code, msg := h.callFails(id, "readRows", "nope"); code != http.StatusBadRequest || !strings.Contains(msg, "unknown table") {
			t.Errorf("readRows of an unknown table: %d %q", code, msg)
		}

		// Without a bearer token the instance answers the §10.1 JSON shape.
		resp, err := http.Post(h.url+mount+"/sync", "application/vnd.syncular.sync.v2", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		var perr struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&perr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || perr.Code != "sync.auth_required" {
			t.Errorf("unauthenticated sync: %d %q, want 401 sync.auth_required", resp.StatusCode, perr.Code)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAllowedScopesDecideWhatASubscriptionReceives(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	id, mount := h.create()
	h.call(id, nil, "setAllowedScopes", "writer", map[string][]string{"project_id": {"*"}})
	w := h.client(mount, "writer", "client-w")
	w.acquireEpoch()
	w.push("c1", task("t1", "p1", "one", nil))

	b := h.client(mount, "actor-b", "client-b")
	b.acquireEpoch()
	if s := b.pull(-1); s.start.Status != wire.SubRevoked || s.rows != 0 {
		t.Errorf("an actor never set: %v with %d rows, want revoked", s.start.Status, s.rows)
	}
	h.call(id, nil, "setAllowedScopes", "actor-b", map[string][]string{"project_id": {"p1"}})
	s := b.pull(-1)
	if s.start.Status != wire.SubActive || s.rows != 1 {
		t.Fatalf("allowed p1: %v with %d rows, want active with 1", s.start.Status, s.rows)
	}
	w.push("c2", task("t2", "p1", "two", nil))
	if inc := b.pull(s.nextCursor); inc.start.Status != wire.SubActive || len(inc.commits) != 1 {
		t.Errorf("incremental pull: %v with %d commits, want active with 1", inc.start.Status, len(inc.commits))
	}
	h.call(id, nil, "setResolverFailing", true)
	if s := b.pull(s.nextCursor); s.start.Status != wire.SubRevoked {
		t.Errorf("failing resolver: %v, want revoked (fail closed)", s.start.Status)
	}
	h.call(id, nil, "setResolverFailing", false)
	h.call(id, nil, "setAllowedScopes", "actor-b", map[string][]string{})
	if s := b.pull(s.nextCursor); s.start.Status != wire.SubRevoked {
		t.Errorf("scopes withdrawn: %v, want revoked", s.start.Status)
	}
}

func TestAdvanceClockStampsCommits(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		cursor := a.pull(-1).nextCursor
		var now int64
		h.call(id, &now, "nowMs")
		if now != startMs {
			t.Fatalf("nowMs = %d, want %d", now, startMs)
		}
		a.push("c1", task("t1", "p1", "one", nil))
		h.call(id, nil, "advanceClock", 5000)
		a.push("c2", task("t2", "p1", "two", nil))
		s := a.pull(cursor)
		if len(s.commits) != 2 || s.commits[0].CreatedAtMs != startMs || s.commits[1].CreatedAtMs != startMs+5000 {
			t.Fatalf("commits %+v, want createdAtMs %d and %d", s.commits, startMs, startMs+5000)
		}
		h.call(id, &now, "nowMs")
		if now != startMs+5000 {
			t.Errorf("nowMs = %d, want %d", now, startMs+5000)
		}
		if code, _ := h.callFails(id, "advanceClock", -1); code != http.StatusBadRequest {
			t.Errorf("advanceClock(-1): %d, want 400", code)
		}
	})
}

func TestPruneAdvancesTheHorizon(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		var horizon int64
		h.call(id, &horizon, "prune")
		if horizon != 0 {
			t.Fatalf("prune before any request = %d, want 0", horizon)
		}
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		a.push("c1", task("t1", "p1", "one", nil))
		reader := h.client(mount, "actor-a", "client-r")
		reader.acquireEpoch()
		cursor := reader.pull(-1).nextCursor // an active cursor at 1
		a.push("c2", task("t2", "p1", "two", nil))
		a.push("c3", task("t3", "p1", "three", nil))

		h.call(id, &horizon, "prune")
		if horizon != 0 {
			t.Errorf("prune with the defaults (1000 retained) = %d, want 0", horizon)
		}
		h.call(id, &horizon, "prune", map[string]any{"minRetainedCommits": 0})
		if horizon != cursor {
			t.Errorf("prune held by the active cursor = %d, want %d", horizon, cursor)
		}
		h.call(id, nil, "advanceClock", 2000)
		h.call(id, &horizon, "prune", map[string]any{"minRetainedCommits": 0, "activeWindowMs": 1000})
		if horizon != 3 {
			t.Errorf("prune past the active window = %d, want 3", horizon)
		}
		var got int64
		h.call(id, &got, "getHorizonSeq")
		if got != 3 {
			t.Errorf("getHorizonSeq = %d, want 3", got)
		}
		if s := reader.pull(cursor); s.start.Status != wire.SubReset || s.start.ReasonCode != "sync.cursor_expired" {
			t.Errorf("pull behind the horizon: %v %q, want reset sync.cursor_expired", s.start.Status, s.start.ReasonCode)
		}
		if code, _ := h.callFails(id, "prune", map[string]any{"ageForceMs": -1}); code != http.StatusBadRequest {
			t.Errorf("negative retention: %d, want 400", code)
		}
	})
}

func TestDeleteClosesTheInstance(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		id, mount := h.create()
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		h.client(mount, "actor-a", "client-a").acquireEpoch()
		h.call(id, nil, "captureBackup")
		h.call(id, nil, "restoreBackup")
		gone := h.databasesGone(id)
		var out map[string]any
		if code := h.do("DELETE", "/__conformance/instances/"+id, nil, &out); code != http.StatusOK || len(out) != 0 {
			t.Fatalf("delete: %d %v, want 200 {}", code, out)
		}
		if left := gone(); left != "" {
			t.Errorf("after delete, the instance's databases are still there: %s", left)
		}
		resp, err := http.Post(h.url+mount+"/sync", "application/vnd.syncular.sync.v2", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("sync after delete: %d, want 404", resp.StatusCode)
		}
		if code := h.do("POST", "/__conformance/instances/"+id+"/call", map[string]any{"method": "nowMs"}, nil); code != http.StatusNotFound {
			t.Errorf("call after delete: %d, want 404", code)
		}
		if code := h.do("DELETE", "/__conformance/instances/"+id, nil, nil); code != http.StatusNotFound {
			t.Errorf("second delete: %d, want 404", code)
		}
	})
}

func TestListenRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0", "127.0.0.1"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded, want a refusal", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := Listen(addr)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
			t.Errorf("Listen(%q) bound %s", addr, ln.Addr())
		}
		ln.Close()
	}
}

// TestCreateAcceptsHarnessSchemas: the harness posts schemas whose
// declared references carry no index and whose crdt columns may omit
// crdtType; the instance fills them in as the reference driver does.
func TestCreateAcceptsHarnessSchemas(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	const refs = `{"version": 1, "tables": [
  {"name": "projects", "primaryKey": "project_id",
   "columns": [{"name": "project_id", "type": "string", "nullable": false},
               {"name": "doc", "type": "crdt", "nullable": true}],
   "scopes": [{"pattern": "project:{project_id}"}]},
  {"name": "items", "primaryKey": "id",
   "columns": [{"name": "id", "type": "string", "nullable": false},
               {"name": "project_id", "type": "string", "nullable": false},
               {"name": "cascade_parent", "type": "string", "nullable": true}],
   "scopes": [{"pattern": "project:{project_id}"}],
   "references": [{"column": "cascade_parent", "parentTable": "projects", "onDelete": "CASCADE"}],
   "ftsIndexes": [{"name": "items_fts", "columns": ["id"], "tokenize": "unicode61"}]}]}`
	var out struct{ ID, Error string }
	body := map[string]any{"schema": json.RawMessage(refs), "partition": "part-1", "nowMs": startMs}
	if code := h.do("POST", "/__conformance/instances", body, &out); code != http.StatusOK || out.ID == "" {
		t.Fatalf("create: %d %q", code, out.Error)
	}
	var rows []any
	h.call(out.ID, &rows, "readRows", "items")
	if len(rows) != 0 {
		t.Errorf("readRows of a new instance = %v, want []", rows)
	}
}
