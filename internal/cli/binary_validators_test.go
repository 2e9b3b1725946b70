package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/sspclient"
)

// Declarative write rules in the config file: syncgo serve runs them in
// the push transaction like a Go host's validators, so a too-long title is
// rejected with the configured code and writes nothing, a short one is
// applied; config check refuses a rule naming an unknown column.
func TestBinaryDeclarativeValidators(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "syncgo.yaml")
	must(t, os.WriteFile(cfgPath, []byte(`listen: 127.0.0.1:0
db: `+filepath.Join(dir, "v.db")+`
validators:
  - table: tasks
    rule: {kind: maxLength, column: title, max: 5, code: app.title_too_long}
`), 0o600))
	p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", cfgPath)
	c, err := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
	must(t, err)
	long, err := c.Upsert("tasks", map[string]any{"id": "t1", "project_id": "p1", "title": "far too long", "done": false, "notes": nil})
	must(t, err)
	short, err := c.Upsert("tasks", map[string]any{"id": "t2", "project_id": "p1", "title": "short", "done": false, "notes": nil})
	must(t, err)
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if o, ok := c.Outcome(long); !ok || o.ErrorCode() != "app.title_too_long" {
		t.Fatalf("the long title: %+v, want rejected with app.title_too_long", o)
	}
	if o, ok := c.Outcome(short); !ok || o.ErrorCode() != "" {
		t.Fatalf("the short title: %+v, want applied", o)
	}

	bad := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(bad, []byte("validators:\n  - table: tasks\n    rule: {kind: maxLength, column: titel, max: 5, code: app.x}\n"), 0o600))
	_, errOut, code := binarytest.Run(t, bin, nil, "config", "check", bad)
	if code == 0 || !strings.Contains(errOut, `table "tasks" has no column "titel"`) {
		t.Fatalf("config check of a rule on an unknown column: exit %d: %s", code, errOut)
	}
}
