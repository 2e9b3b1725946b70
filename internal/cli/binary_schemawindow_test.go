package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
)

// demoV2 is the demo schema at version 2: tasks gained a nullable
// priority column, appended.
func demoV2(t *testing.T, demo []byte) []byte {
	t.Helper()
	const notes = `{ "name": "notes", "type": "json", "nullable": true }`
	v2 := strings.Replace(string(demo), `"version": 1`, `"version": 2`, 1)
	v2 = strings.Replace(v2, notes, notes+`,
        { "name": "priority", "type": "integer", "nullable": true }`, 1)
	if strings.Count(v2, "priority") != 1 || !strings.Contains(v2, `"version": 2`) {
		t.Fatal("the demo schema changed: the test cannot derive version 2 from it")
	}
	return []byte(v2)
}

// The binary serves the schema window of its config file: with
// schema_window naming version 1, a version-1 client pushes and pulls
// against a version-2 server in its own layout (a version-2 client's row
// reaches it without the column it does not know, and its own row gets a
// NULL priority); without it, the same client is refused
// (sync.client_schema_unsupported, version 2 required) and nothing of
// its push is applied. config
// check lists the window and refuses one that is not a prefix of the
// running schema, or holds the running version.
func TestBinarySchemaWindow(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	v1Path, v2Path := filepath.Join(dir, "v1.json"), filepath.Join(dir, "v2.json")
	demo, err := os.ReadFile("demo_schema.json")
	must(t, err)
	must(t, os.WriteFile(v1Path, demo, 0o600))
	v2JSON := demoV2(t, demo)
	must(t, os.WriteFile(v2Path, v2JSON, 0o600))
	v1 := schemaDemo(t)
	parsed, err := schema.ParseJSON(v2JSON)
	must(t, err)
	v2, err := schema.Compile(parsed)
	must(t, err)
	ctx := context.Background()

	window := func(t *testing.T, name, db string) {
		cfgPath := filepath.Join(dir, "window-"+name+".yaml")
		must(t, os.WriteFile(cfgPath, []byte("listen: 127.0.0.1:0\ndb: \""+db+"\"\nschema: v2.json\nschema_window: [v1.json]\n"), 0o600))
		p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", cfgPath)

		old, err := sspclient.New(p.URL, "alice", v1, sspclient.Options{})
		must(t, err)
		must(t, old.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}))
		oldTask, err := old.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "from v1", "done": false, "notes": nil})
		must(t, err)
		_, err = old.SyncUntilQuiet(ctx, 10)
		must(t, err)
		if o, ok := old.Outcome(oldTask); !ok || o.ErrorCode() != "" {
			t.Fatalf("the version-1 push: %+v, want applied", o)
		}

		cur, err := sspclient.New(p.URL, "bob", v2, sspclient.Options{})
		must(t, err)
		must(t, cur.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}))
		_, err = cur.Upsert("tasks", map[string]any{"id": "t2", "project_id": "p1", "title": "from v2", "done": false, "notes": nil, "priority": int64(5)})
		must(t, err)
		_, err = cur.SyncUntilQuiet(ctx, 10)
		must(t, err)
		tasks2, _ := v2.Table("tasks")
		t1, ok := cur.Row("tasks", "t1")
		if m := t1.Map(tasks2); !ok || m["priority"] != nil || m["title"] != "from v1" {
			t.Fatalf("the version-1 row as version 2 reads it: %v (%v)", m, ok)
		}

		_, err = old.SyncUntilQuiet(ctx, 10)
		must(t, err)
		tasks1, _ := v1.Table("tasks")
		t2, ok := old.Row("tasks", "t2")
		if m := t2.Map(tasks1); !ok || m["title"] != "from v2" || len(t2.Values) != 5 {
			t.Fatalf("the version-2 row as version 1 gets it: %v, %d values (%v), want version 1's 5 columns", m, len(t2.Values), ok)
		}
	}
	t.Run("window/sqlite", func(t *testing.T) { window(t, "sqlite", filepath.Join(dir, "w.db")) })
	t.Run("window/postgres", func(t *testing.T) { window(t, "postgres", pgtest.Schema(t, "schemawin", false)) })

	t.Run("none", func(t *testing.T) {
		cfgPath := filepath.Join(dir, "none.yaml")
		must(t, os.WriteFile(cfgPath, []byte("listen: 127.0.0.1:0\ndb: "+filepath.Join(dir, "n.db")+"\nschema: v2.json\n"), 0o600))
		p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", cfgPath)
		old, err := sspclient.New(p.URL, "alice", v1, sspclient.Options{})
		must(t, err)
		must(t, old.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}))
		_, err = old.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "from v1", "done": false, "notes": nil})
		must(t, err)
		if _, err := old.Sync(ctx); err == nil || !strings.Contains(err.Error(), "sync.client_schema_unsupported") ||
			!strings.Contains(err.Error(), "required 2") {
			t.Fatalf("a version-1 client without a window: %v, want sync.client_schema_unsupported naming version 2", err)
		}
		cur, err := sspclient.New(p.URL, "bob", v2, sspclient.Options{})
		must(t, err)
		must(t, cur.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}))
		_, err = cur.SyncUntilQuiet(ctx, 10)
		must(t, err)
		if n := len(cur.Rows("tasks")); n != 0 {
			t.Fatalf("the refused version-1 push wrote %d rows", n)
		}
	})

	t.Run("check", func(t *testing.T) {
		good := filepath.Join(dir, "good.yaml")
		must(t, os.WriteFile(good, []byte("schema: v2.json\nschema_window: [v1.json]\n"), 0o600))
		out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", good)
		if code != 0 || !strings.Contains(out, "schema window: clients of versions 1 served too") {
			t.Fatalf("config check of a window: exit %d: %s %s", code, out, errOut)
		}
		// Version 1 with another primary key for tasks is no prefix.
		bad := strings.Replace(string(demo), `"primaryKey": "id",
      "columns": [
        { "name": "id", "type": "string", "nullable": false },
        { "name": "project_id"`, `"primaryKey": "project_id",
      "columns": [
        { "name": "id", "type": "string", "nullable": false },
        { "name": "project_id"`, 1)
		if bad == string(demo) {
			t.Fatal("the test's bad schema did not change")
		}
		must(t, os.WriteFile(filepath.Join(dir, "bad-v1.json"), []byte(bad), 0o600))
		for _, c := range []struct{ window, want string }{
			{"[bad-v1.json]", `table "tasks" changed its primary key or scopes after version 1`},
			{"[v2.json]", "version 2 must be below 2"},
			{"[v1.json, v1.json]", "are both version 1"},
		} {
			path := filepath.Join(dir, "bad.yaml")
			must(t, os.WriteFile(path, []byte("schema: v2.json\nschema_window: "+c.window+"\n"), 0o600))
			_, errOut, code := binarytest.Run(t, bin, nil, "config", "check", path)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Fatalf("config check of schema_window %s: exit %d: %s, want %q", c.window, code, errOut, c.want)
			}
		}
	})
}
