package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// conformanceTable is the TABLE example of conformance-mode.md.
const conformanceTable = `
    { "name": "tasks", "primaryKey": "id",
      "columns": [ { "name": "id", "type": "string", "nullable": false },
                   { "name": "body", "type": "bytes", "nullable": true,
                     "encrypted": true, "declaredType": "string" },
                   { "name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc" } ],
      "scopes":  [ { "pattern": "project:{project_id}", "column": "project_id" } ] }`

func TestParseJSONConformanceTable(t *testing.T) {
	t.Parallel()
	got, err := ParseJSON([]byte(`{"version": 1, "tables": [` + conformanceTable + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Schema{Version: 1, Tables: []Table{{
		Name:       "tasks",
		PrimaryKey: "id",
		Columns: []Column{
			{Name: "id", Type: wire.TypeString},
			{Name: "body", Type: wire.TypeBytes, Nullable: true, Encrypted: true, DeclaredType: "string"},
			{Name: "doc", Type: wire.TypeCRDT, Nullable: true, CRDTType: "yjs-doc"},
		},
		Scopes: []Scope{{Pattern: "project:{project_id}", Column: "project_id"}},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// fullDocument uses every field of the IR, in the order MarshalJSON writes.
const fullDocument = `{"version":7,"tables":[` +
	`{"name":"projects","primaryKey":"id","columns":[{"name":"id","type":"integer","nullable":false}],` +
	`"scopes":[{"pattern":"project:{project_id}","column":"id"}],"materialize":false},` +
	`{"name":"tasks","primaryKey":"id","columns":[` +
	`{"name":"id","type":"string","nullable":false},` +
	`{"name":"project_id","type":"integer","nullable":true},` +
	`{"name":"score","type":"float","nullable":true},` +
	`{"name":"meta","type":"json","nullable":true},` +
	`{"name":"done","type":"boolean","nullable":false},` +
	`{"name":"file","type":"blob_ref","nullable":true},` +
	`{"name":"doc","type":"crdt","nullable":true,"crdtType":"yjs-doc"},` +
	`{"name":"body","type":"bytes","nullable":true,"encrypted":true,"declaredType":"json"}],` +
	`"scopes":["project:{project_id}"],` +
	`"indexes":[{"name":"tasks_by_project","columns":["project_id"],"unique":false},{"name":"tasks_by_done","columns":["done","id"],"unique":true}],` +
	`"references":[{"column":"project_id","parentTable":"projects","onDelete":"SET NULL"}],` +
	`"ftsIndexes":[{"name":"tasks_fts","columns":["meta"],"tokenize":"unicode61"}],"materialize":true}]}`

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := ParseJSON([]byte(fullDocument))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(s); err != nil {
		t.Fatalf("Compile: %v", err)
	}
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != fullDocument {
		t.Errorf("round trip:\n got %s\nwant %s", got, fullDocument)
	}
	byValue, err := json.Marshal(*s)
	if err != nil || !bytes.Equal(byValue, got) {
		t.Errorf("marshal by value = %s, %v; want the same bytes as by pointer", byValue, err)
	}

	// A schema built in Go survives JSON unchanged.
	built := testSchema()
	data, err := json.Marshal(built)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, built) {
		t.Errorf("round trip of testSchema:\n got %+v\nwant %+v", back, built)
	}
}

func TestUnmarshalJSONInsideAMessage(t *testing.T) {
	t.Parallel()
	var body struct {
		Schema    *Schema `json:"schema"`
		Partition string  `json:"partition"`
	}
	msg := `{"schema": {"version": 2, "tables": []}, "partition": "part-1"}`
	if err := json.Unmarshal([]byte(msg), &body); err != nil {
		t.Fatal(err)
	}
	if body.Schema == nil || body.Schema.Version != 2 || body.Partition != "part-1" {
		t.Errorf("decoded %+v", body)
	}
	msg = `{"schema": {"version": 2, "tables": [], "extra": 1}}`
	if err := json.Unmarshal([]byte(msg), &body); err == nil || !strings.Contains(err.Error(), `unknown field "extra"`) {
		t.Errorf("unknown field in a nested schema: err = %v", err)
	}
}

func TestParseJSONNullOptionalFields(t *testing.T) {
	t.Parallel()
	doc := `{"version":1,"tables":[{"name":"t","primaryKey":"id",
		"columns":[{"name":"id","type":"string","nullable":false,"crdtType":null,"encrypted":null,"declaredType":null}],
		"scopes":[{"pattern":"x:{id}","column":null}],"indexes":null,"references":null,"ftsIndexes":null,"materialize":null}]}`
	s, err := ParseJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &Schema{Version: 1, Tables: []Table{{
		Name: "t", PrimaryKey: "id",
		Columns: []Column{{Name: "id", Type: wire.TypeString}},
		Scopes:  []Scope{{Pattern: "x:{id}"}},
	}}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got  %+v\nwant %+v", s, want)
	}
}

func TestParseJSONErrors(t *testing.T) {
	t.Parallel()
	// table wraps one table's members around the required ones.
	table := func(extra string) string {
		return `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[{"name":"id","type":"string","nullable":false}],"scopes":["x:{id}"]` + extra + `}]}`
	}
	tests := []struct {
		name, doc, want string
	}{
		{"not an object", `[]`, `expected an object`},
		{"unknown root field", `{"version":1,"tables":[],"extra":1}`, `unknown field "extra"`},
		{"duplicate root field", `{"version":1,"version":2,"tables":[]}`, `duplicate field "version"`},
		{"trailing data", `{"version":1,"tables":[]} {}`, `unexpected data after the object`},
		{"missing version", `{"tables":[]}`, `missing field "version"`},
		{"quoted version", `{"version":"1","tables":[]}`, `version: expected an integer`},
		{"fractional version", `{"version":1.5,"tables":[]}`, `version: expected a 32-bit integer, got 1.5`},
		{"huge version", `{"version":4294967296,"tables":[]}`, `version: expected a 32-bit integer, got 4294967296`},
		{"missing tables", `{"version":1}`, `missing field "tables"`},
		{"tables not an array", `{"version":1,"tables":{}}`, `tables: expected an array`},
		{"table not an object", `{"version":1,"tables":[1]}`, `tables[0]: expected an object`},
		{"misspelled column field", `{"version":1,"tables":[` + conformanceTable + `,{"name":"u","primaryKey":"id","columns":[{"name":"id","type":"string","nulable":false}],"scopes":[]}]}`,
			`tables[1].columns[0]: unknown field "nulable"`},
		{"missing name", `{"version":1,"tables":[{"primaryKey":"id","columns":[],"scopes":[]}]}`, `tables[0]: missing field "name"`},
		{"missing columns", `{"version":1,"tables":[{"name":"t","primaryKey":"id","scopes":[]}]}`, `tables[0]: missing field "columns"`},
		{"missing scopes", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[]}]}`, `tables[0]: missing field "scopes"`},
		{"unknown table field", table(`,"extensions":{}`), `tables[0]: unknown field "extensions"`},
		{"duplicate table field", table(`,"name":"u"`), `tables[0]: duplicate field "name"`},
		{"unknown type", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[{"name":"id","type":"text","nullable":false}],"scopes":[]}]}`,
			`tables[0].columns[0].type: unknown column type "text"`},
		{"missing nullable", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[{"name":"id","type":"string"}],"scopes":[]}]}`,
			`tables[0].columns[0]: missing field "nullable"`},
		{"quoted nullable", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[{"name":"id","type":"string","nullable":"false"}],"scopes":[]}]}`,
			`tables[0].columns[0].nullable: expected a boolean`},
		{"numeric name", `{"version":1,"tables":[{"name":1,"primaryKey":"id","columns":[],"scopes":[]}]}`, `tables[0].name: expected a string`},
		{"scope not a string or object", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[],"scopes":[1]}]}`,
			`tables[0].scopes[0]: expected a pattern string or an object`},
		{"unknown scope field", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[],"scopes":[{"pattern":"x:{id}","variable":"id"}]}]}`,
			`tables[0].scopes[0]: unknown field "variable"`},
		{"scope without pattern", `{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[],"scopes":[{"column":"id"}]}]}`,
			`tables[0].scopes[0]: missing field "pattern"`},
		{"index column not a string", table(`,"indexes":[{"name":"i","columns":[1]}]`), `tables[0].indexes[0].columns[0]: expected a string`},
		{"index without columns", table(`,"indexes":[{"name":"i"}]`), `tables[0].indexes[0]: missing field "columns"`},
		{"quoted unique", table(`,"indexes":[{"name":"i","columns":["id"],"unique":"yes"}]`), `tables[0].indexes[0].unique: expected a boolean`},
		{"unknown reference field", table(`,"references":[{"column":"id","parentTable":"t","parentColumn":"id"}]`), `tables[0].references[0]: unknown field "parentColumn"`},
		{"reference without parent", table(`,"references":[{"column":"id"}]`), `tables[0].references[0]: missing field "parentTable"`},
		{"quoted materialize", table(`,"materialize":"yes"`), `tables[0].materialize: expected a boolean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseJSON([]byte(tt.doc))
			if err == nil {
				t.Fatalf("ParseJSON succeeded, want %q", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseJSONMalformed(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{``, `{`, `{"version":`, `{"version":1,"tables":[}`, `nul`} {
		if _, err := ParseJSON([]byte(doc)); err == nil {
			t.Errorf("ParseJSON(%q) succeeded", doc)
		}
	}
}

func TestMarshalJSONInvalidType(t *testing.T) {
	t.Parallel()
	s := New(1).Table("t", "id", Column{Name: "id"}).Scope("x:{id}").Schema()
	if _, err := json.Marshal(s); err == nil {
		t.Error("Marshal of a column without a type succeeded")
	}
}
