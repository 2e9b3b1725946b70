package cli_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

const fidelitySchema = `{"version": 1, "tables": [
  {"name": "vals", "primaryKey": "id", "scopes": ["project:{project_id}"], "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "project_id", "type": "string", "nullable": false},
    {"name": "n", "type": "integer", "nullable": true},
    {"name": "f", "type": "float", "nullable": true},
    {"name": "ok", "type": "boolean", "nullable": true},
    {"name": "meta", "type": "json", "nullable": true},
    {"name": "raw", "type": "bytes", "nullable": true},
    {"name": "ref", "type": "blob_ref", "nullable": true}]}]}`

// Rows moved with `syncgo export` and `syncgo import` (SQLite to SQLite
// and SQLite to Postgres) arrive with every value as it was pushed, as
// the clients of the new server pull it: floats to the bit (-0, NaN,
// ±Infinity, subnormals), json documents byte for byte (their spacing and
// key order), bytes, NULLs. Before, a table holding one NaN or infinite
// float could not be exported at all (json: unsupported value), and json
// documents were re-spaced.
func TestBinaryExportImportValueFidelity(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(fidelitySchema), 0o600))
	parsed, err := schema.ParseJSON([]byte(fidelitySchema))
	must(t, err)
	sc, err := schema.Compile(parsed)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	floats := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 5e-324, math.MaxFloat64, 0.1, -1.5e300, 9007199254740993}
	metas := []string{`{"b": 1, "a": [1, 2]}`, "{\"x\":\t\"tab\"}", `[]`, `"str"`, `12.50`, `{"a":1,"a":2}`, `{"u":"\u00e9\ud83d\ude00"}`, `[ 1 ,2 ]`, `true`, `{}`}
	rows := map[string]map[string]any{}
	for i, f := range floats {
		id := fmt.Sprintf("r%02d", i)
		rows[id] = map[string]any{"id": id, "project_id": "p1", "n": int64(1<<53 - 1 - i), "f": f, "ok": i%2 == 0,
			"meta": metas[i], "raw": []byte{0, byte(i), 0xff}, "ref": nil}
	}
	rows["nulls"] = map[string]any{"id": "nulls", "project_id": "p1", "n": nil, "f": nil, "ok": nil, "meta": nil, "raw": nil, "ref": nil}
	rows["min"] = map[string]any{"id": "min", "project_id": "p1", "n": int64(-(1<<53 - 1)), "f": math.Copysign(0, -1), "ok": false, "meta": `{ }`, "raw": []byte{}, "ref": nil}

	pull := func(t *testing.T, url string) map[string]sspclient.Row {
		t.Helper()
		c, err := sspclient.New(url, "reader", sc, sspclient.Options{})
		must(t, err)
		must(t, c.Subscribe("all", "vals", map[string][]string{"project_id": {"p1"}}))
		if _, err := c.SyncUntilQuiet(ctx, 0); err != nil {
			t.Fatal(err)
		}
		return c.Rows("vals")
	}

	// The source: a server on SQLite, written by a client.
	srcDB := filepath.Join(dir, "src.db")
	src := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", srcDB)
	w, err := sspclient.New(src.URL, "writer", sc, sspclient.Options{})
	must(t, err)
	if _, err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := w.Upsert("vals", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.SyncUntilQuiet(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, o := range w.Outcomes() {
		if o.Status != wire.PushApplied {
			t.Fatalf("push %s: %+v", o.CommitID, o)
		}
	}
	want := pull(t, src.URL)
	if len(want) != len(rows) {
		t.Fatalf("the source serves %d rows; %d were pushed", len(want), len(rows))
	}
	exported := filepath.Join(dir, "vals.jsonl")
	_, errOut, code := binarytest.Run(t, bin, nil, "export", "-db", srcDB, "-schema", schemaPath, "-partition", "default", "-table", "vals", "-out", exported)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}

	tbl, _ := sc.Table("vals")
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "dst.db")
			if driver == "postgres" {
				db = pgtest.Schema(t, "fidelity", false)
			}
			dst := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", db)
			for i, wantOut := range []string{"1 applied, 0 cached", "0 applied, 1 cached"} {
				out, errOut, code := binarytest.Run(t, bin, []string{"SYNCGO_IMPORT_TOKEN=loader"},
					"import", "-url", dst.URL, "-schema", schemaPath, "-table", "vals", "-id", "move", exported)
				if code != 0 || !strings.Contains(out, wantOut) {
					t.Fatalf("import run %d: exit %d\n%s%s", i+1, code, out, errOut)
				}
			}
			got := pull(t, dst.URL)
			if len(got) != len(want) {
				t.Fatalf("the new server serves %d rows; want %d", len(got), len(want))
			}
			for id, wr := range want {
				gr, ok := got[id]
				if !ok {
					t.Errorf("row %s missing", id)
					continue
				}
				for i, c := range tbl.Columns() {
					if !sameValue(c.Type, wr.Values[i], gr.Values[i]) {
						t.Errorf("row %s column %s: moved %#v; the source serves %#v", id, c.Name, gr.Values[i], wr.Values[i])
					}
				}
			}
			// The new server's export is the source's, line for line.
			again := filepath.Join(t.TempDir(), "again.jsonl")
			_, errOut, code := binarytest.Run(t, bin, nil, "export", "-db", db, "-schema", schemaPath, "-partition", "default", "-table", "vals", "-out", again)
			a, _ := os.ReadFile(exported)
			b, _ := os.ReadFile(again)
			if code != 0 || string(a) != string(b) {
				t.Errorf("export of the new server: exit %d %s\n%s\nwant\n%s", code, errOut, b, a)
			}
		})
	}
}

// sameValue compares two values of a column of type ct, floats by their
// bits.
func sameValue(ct wire.ColumnType, a, b wire.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	switch ct {
	case wire.TypeFloat:
		return math.Float64bits(a.Float) == math.Float64bits(b.Float) || (math.IsNaN(a.Float) && math.IsNaN(b.Float))
	case wire.TypeInteger:
		return a.Int == b.Int
	case wire.TypeBoolean:
		return a.Bool == b.Bool
	case wire.TypeBytes, wire.TypeCRDT:
		return string(a.Bytes) == string(b.Bytes)
	}
	return a.Str == b.Str
}
