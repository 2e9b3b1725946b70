package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
)

// `syncgo import` against `syncgo serve`: the rows of a JSON Lines file
// arrive as commits with every column type, a second run writes nothing,
// and bad input is refused with its line.

const importSchema = `{"version": 1, "tables": [
  {"name": "items", "primaryKey": "id", "scopes": ["project:{project_id}"], "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "project_id", "type": "string", "nullable": false},
    {"name": "n", "type": "integer", "nullable": false},
    {"name": "f", "type": "float", "nullable": true},
    {"name": "ok", "type": "boolean", "nullable": false},
    {"name": "meta", "type": "json", "nullable": true},
    {"name": "raw", "type": "bytes", "nullable": true}]}]}`

func TestBinaryImport(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(importSchema), 0o600))
	parsed, err := schema.ParseJSON([]byte(importSchema))
	must(t, err)
	sc, err := schema.Compile(parsed)
	must(t, err)
	var lines strings.Builder
	const rows = 450
	for i := range rows {
		fmt.Fprintf(&lines, `{"id":"i%03d","project_id":"p1","n":%d,"f":%g,"ok":%t,"meta":{"tags":["a"],"i":%d},"raw":"AQI="}`+"\n", i, 9007199254740000+i, float64(i)/4, i%2 == 0, i)
	}
	lines.WriteString("\n") // a blank line is skipped
	file := filepath.Join(dir, "items.jsonl")
	must(t, os.WriteFile(file, []byte(lines.String()), 0o600))

	// The SQLite run exports its rows at the end; the Postgres run imports
	// that export: a partition's rows moved from SQLite to Postgres.
	sqliteDB := filepath.Join(dir, "s.db")
	exported := filepath.Join(dir, "exported.jsonl")
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			args := []string{"-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", sqliteDB}
			source := file
			if driver == "postgres" {
				args[len(args)-1] = pgtest.Schema(t, "import", false)
				if _, err := os.Stat(exported); err != nil {
					t.Skip("the SQLite run exported nothing")
				}
				source = exported
			}
			p := binarytest.Serve(t, bin, binarytest.Options{}, args...)
			env := []string{"SYNCGO_IMPORT_TOKEN=loader"}
			run := func(extra ...string) (string, string, int) {
				return binarytest.Run(t, bin, env, append([]string{"import", "-url", p.URL, "-schema", schemaPath, "-table", "items"}, extra...)...)
			}
			out, errOut, code := run("-id", "seed", "-batch", "200", source)
			if code != 0 || !strings.Contains(out, "imported 450 rows into items in 3 commits: 3 applied, 0 cached") {
				t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
			}
			out, errOut, code = run("-id", "seed", "-batch", "200", source)
			if code != 0 || !strings.Contains(out, "3 commits: 0 applied, 3 cached") {
				t.Fatalf("the same import again: exit %d\n%s%s", code, out, errOut)
			}

			// One more row over POST /commits (JSON), deleted again
			// below, before the export.
			postJSON := func(body string) string {
				req, err := http.NewRequest(http.MethodPost, p.URL+"/commits", strings.NewReader(body))
				must(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer loader")
				resp, err := http.DefaultClient.Do(req)
				must(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				must(t, err)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("POST /commits: %d %s", resp.StatusCode, b)
				}
				return string(b)
			}
			if out := postJSON(`{"clientId":"jsonwriter","commits":[{"clientCommitId":"j1","operations":[{"table":"items","op":"upsert",` +
				`"row":{"id":"j1","project_id":"p1","n":-5,"f":null,"ok":true,"meta":[1,{"a":null}],"raw":"/w=="}}]}]}`); !strings.Contains(out, `"status":"applied"`) {
				t.Fatalf("POST /commits: %s", out)
			}

			c, _ := sspclient.New(p.URL, "reader", sc, sspclient.Options{})
			must(t, c.Subscribe("all", "items", map[string][]string{"project_id": {"p1"}}))
			if _, err := c.SyncUntilQuiet(context.Background(), 20); err != nil {
				t.Fatal(err)
			}
			got := c.Rows("items")
			tbl, _ := sc.Table("items")
			if len(got) != rows+1 {
				t.Fatalf("%d rows pulled; want %d", len(got), rows+1)
			}
			if m := got["j1"].Map(tbl); m["n"] != int64(-5) || m["f"] != nil || m["meta"] != `[1,{"a":null}]` || string(m["raw"].([]byte)) != "\xff" {
				t.Errorf("row j1 written over JSON: %v", m)
			}
			if out := postJSON(`{"clientId":"jsonwriter","commits":[{"clientCommitId":"j2","operations":[{"table":"items","op":"delete","rowId":"j1"}]}]}`); !strings.Contains(out, `"status":"applied"`) {
				t.Fatalf("POST /commits: %s", out)
			}
			m := got["i007"].Map(tbl)
			if m["n"] != int64(9007199254740007) || m["f"] != 1.75 || m["ok"] != false || m["meta"] != `{"tags":["a"],"i":7}` || string(m["raw"].([]byte)) != "\x01\x02" {
				t.Errorf("row i007: %v", m)
			}

			// A line that is not a row of the table: refused with its line.
			bad := filepath.Join(t.TempDir(), "bad.jsonl")
			must(t, os.WriteFile(bad, []byte(`{"id":"x1","project_id":"p1","n":1,"ok":true}`+"\n"+`{"id":"x2","n":1.5}`+"\n"), 0o600))
			if _, errOut, code := run("-id", "bad", bad); code != 1 || !strings.Contains(errOut, "line 2") || !strings.Contains(errOut, "column n (integer)") {
				t.Errorf("a fractional integer: exit %d\n%s", code, errOut)
			}
			// A row the server rejects (a new row without its
			// non-nullable columns): reported, exit 1.
			partial := filepath.Join(t.TempDir(), "partial.jsonl")
			must(t, os.WriteFile(partial, []byte(`{"id":"y1","project_id":"p1"}`+"\n"), 0o600))
			if out, errOut, code := run("-id", "partial", partial); code != 1 || !strings.Contains(out, "1 rejected") || !strings.Contains(errOut, "commit partial-1-") {
				t.Errorf("a partial new row: exit %d\n%s%s", code, out, errOut)
			}

			// Export, from the database without the server: the same
			// lines as the input, in row order.
			db := args[len(args)-1]
			if driver == "sqlite" {
				p.Stop()
			}
			target := filepath.Join(t.TempDir(), "out.jsonl")
			if driver == "sqlite" {
				target = exported
			}
			_, errOut, code = binarytest.Run(t, bin, nil, "export", "-db", db, "-schema", schemaPath, "-partition", "default", "-table", "items", "-out", target)
			written, _ := os.ReadFile(target)
			if code != 0 || string(written) != strings.TrimSuffix(lines.String(), "\n") || !strings.Contains(errOut, "exported 450 rows") {
				t.Errorf("export: exit %d, %d bytes (want %d)\n%s", code, len(written), len(lines.String())-1, errOut)
			}
		})
	}
}

// An import resumed with another -batch (or another file under the same
// -id) writes every row of the file: before, the commit ids were only
// <id>-<n>, so the second run's first commits were answered "cached"
// for the first run's smaller commits and the rows between were never
// written, while the command reported them imported and exited 0.
func TestBinaryImportResumedWithOtherBatch(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(importSchema), 0o600))
	var all, head strings.Builder
	const rows = 1000
	for i := range rows {
		line := fmt.Sprintf(`{"id":"i%04d","project_id":"p1","n":%d,"f":null,"ok":true,"meta":null,"raw":null}`+"\n", i, i)
		all.WriteString(line)
		if i < 400 {
			head.WriteString(line)
		}
	}
	full, part := filepath.Join(dir, "all.jsonl"), filepath.Join(dir, "part.jsonl")
	must(t, os.WriteFile(full, []byte(all.String()), 0o600))
	must(t, os.WriteFile(part, []byte(head.String()), 0o600))
	db := filepath.Join(dir, "s.db")
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", db)
	env := []string{"SYNCGO_IMPORT_TOKEN=loader"}
	run := func(extra ...string) (string, string, int) {
		return binarytest.Run(t, bin, env, append([]string{"import", "-url", p.URL, "-schema", schemaPath, "-table", "items", "-id", "load"}, extra...)...)
	}
	// The first run stopped after 400 rows in commits of 200.
	if out, errOut, code := run("-batch", "200", part); code != 0 || !strings.Contains(out, "2 applied") {
		t.Fatalf("first run: exit %d\n%s%s", code, out, errOut)
	}
	// Resumed with commits of 500.
	if out, errOut, code := run("-batch", "500", full); code != 0 {
		t.Fatalf("resumed run: exit %d\n%s%s", code, out, errOut)
	}
	// And the same again: nothing left to write.
	if out, errOut, code := run("-batch", "500", full); code != 0 || !strings.Contains(out, "0 applied, 2 cached") {
		t.Fatalf("the same run again: exit %d\n%s%s", code, out, errOut)
	}
	p.Stop()
	target := filepath.Join(dir, "out.jsonl")
	_, errOut, code := binarytest.Run(t, bin, nil, "export", "-db", db, "-schema", schemaPath, "-partition", "default", "-table", "items", "-out", target)
	if code != 0 || !strings.Contains(errOut, fmt.Sprintf("exported %d rows", rows)) {
		t.Fatalf("export after the resumed import: exit %d: %s", code, errOut)
	}
}
