package schema

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// col is a short ColumnLayout constructor for the tables below.
func col(name string, typ wire.ColumnType, nullable bool) ColumnLayout {
	return ColumnLayout{Name: name, Type: typ, Nullable: nullable}
}

func TestLayoutJSON(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, testSchema())
	got, err := json.Marshal(c.Layout())
	if err != nil {
		t.Fatal(err)
	}
	// What JSON.stringify writes for the reference server's layoutsOf.
	want := `{"projects":[{"name":"id","type":"string","nullable":false},{"name":"name","type":"string","nullable":true}],` +
		`"tasks":[{"name":"id","type":"string","nullable":false},{"name":"project_id","type":"string","nullable":false},` +
		`{"name":"title","type":"string","nullable":true},{"name":"done","type":"boolean","nullable":false},` +
		`{"name":"notes","type":"crdt","nullable":true},{"name":"attachment","type":"blob_ref","nullable":true},` +
		`{"name":"body","type":"bytes","nullable":true},{"name":"org_id","type":"integer","nullable":false}],` +
		`"secrets":[{"name":"id","type":"string","nullable":false},{"name":"owner_id","type":"integer","nullable":false},` +
		`{"name":"secret","type":"bytes","nullable":false}]}`
	if string(got) != want {
		t.Errorf("layout JSON:\n got %s\nwant %s", got, want)
	}
	back, err := ParseLayout(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c.Layout()) {
		t.Errorf("ParseLayout round trip:\n got %+v\nwant %+v", back, c.Layout())
	}
}

func TestParseLayout(t *testing.T) {
	t.Parallel()
	for _, empty := range []string{"", "  ", "null", "{}"} {
		l, err := ParseLayout([]byte(empty))
		if err != nil || len(l) != 0 {
			t.Errorf("ParseLayout(%q) = %+v, %v; want empty", empty, l, err)
		}
	}
	l, err := ParseLayout([]byte(`{ "b": [ {"name": "id", "type": "integer", "nullable": false, "later": 1} ], "a": [] }`))
	want := Layout{{Table: "b", Columns: []ColumnLayout{col("id", wire.TypeInteger, false)}}, {Table: "a", Columns: []ColumnLayout{}}}
	if err != nil || !reflect.DeepEqual(l, want) {
		t.Errorf("ParseLayout = %+v, %v; want %+v", l, err, want)
	}
	for doc, wantErr := range map[string]string{
		`[]`:                    `layout: expected an object`,
		`{"t":{}}`:              `layout: t: expected an array`,
		`{"t":[{"name":"id"}]}`: `layout: t[0]: missing field "type"`,
		`{"t":[{"name":"id","type":"text","nullable":true}]}`: `layout: t[0].type: unknown column type "text"`,
		`{"t":[],"t":[]}`: `layout: duplicate field "t"`,
	} {
		if _, err := ParseLayout([]byte(doc)); err == nil || err.Error() != wantErr {
			t.Errorf("ParseLayout(%s) error = %v, want %q", doc, err, wantErr)
		}
	}
}

func TestCheckAppendOnly(t *testing.T) {
	t.Parallel()
	base := Layout{
		{Table: "tasks", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("title", wire.TypeString, true)}},
		{Table: "old", Columns: []ColumnLayout{col("id", wire.TypeString, false)}},
	}
	tests := []struct {
		name string
		next Layout
		want []string
	}{
		{"unchanged", base, nil},
		{"nullable column appended", Layout{{Table: "tasks", Columns: []ColumnLayout{
			col("id", wire.TypeString, false), col("title", wire.TypeString, true), col("due", wire.TypeInteger, true)}}}, nil},
		{"table retired and table added", Layout{base[0], {Table: "new", Columns: []ColumnLayout{col("id", wire.TypeString, false)}}}, nil},
		{"non-nullable column appended", Layout{{Table: "tasks", Columns: []ColumnLayout{
			col("id", wire.TypeString, false), col("title", wire.TypeString, true), col("due", wire.TypeInteger, false)}}},
			[]string{`table "tasks": added column "due" must be nullable: stored rows have no value for it`}},
		{"column removed", Layout{{Table: "tasks", Columns: []ColumnLayout{col("id", wire.TypeString, false)}}},
			[]string{`table "tasks": the schema removed columns; only appending nullable columns is supported`}},
		{"column retyped", Layout{{Table: "tasks", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("title", wire.TypeJSON, true)}}},
			[]string{`table "tasks": column 1 changed from "title" string null to "title" json null; only appending nullable columns is supported`}},
		{"column made non-nullable", Layout{{Table: "tasks", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("title", wire.TypeString, false)}}},
			[]string{`table "tasks": column 1 changed from "title" string null to "title" string not null; only appending nullable columns is supported`}},
		{"columns reordered, every problem reported", Layout{
			{Table: "tasks", Columns: []ColumnLayout{col("title", wire.TypeString, true), col("id", wire.TypeString, false)}},
			{Table: "old", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("x", wire.TypeBoolean, false)}},
		}, []string{
			`table "tasks": column 0 changed from "id" string not null to "title" string null; only appending nullable columns is supported`,
			`table "tasks": column 1 changed from "title" string null to "id" string not null; only appending nullable columns is supported`,
			`table "old": added column "x" must be nullable: stored rows have no value for it`,
		}},
	}
	for _, tt := range tests {
		err := CheckAppendOnly(base, tt.next)
		var got []string
		if err != nil {
			got = strings.Split(err.Error(), "\n")
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: errors\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestRetiredTables(t *testing.T) {
	t.Parallel()
	old := Layout{{Table: "z"}, {Table: "keep"}, {Table: "a"}}
	next := Layout{{Table: "keep"}, {Table: "new"}}
	if got, want := RetiredTables(old, next), []string{"a", "z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("RetiredTables = %q, want %q", got, want)
	}
}

func TestStoredLayoutMismatch(t *testing.T) {
	t.Parallel()
	running := Layout{
		{Table: "a", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("x", wire.TypeString, true)}},
		{Table: "b", Columns: []ColumnLayout{col("id", wire.TypeInteger, false)}},
	}
	tests := []struct {
		name   string
		stored Layout
		want   LayoutMismatch
		differ bool
	}{
		{"equal", running, LayoutMismatch{}, false},
		{"nullability differs", Layout{
			{Table: "a", Columns: []ColumnLayout{col("id", wire.TypeString, false), col("x", wire.TypeString, false)}}, running[1],
		}, LayoutMismatch{Table: "a", Column: "x"}, true},
		{"stored has fewer columns", Layout{{Table: "a", Columns: running[0].Columns[:1]}, running[1]}, LayoutMismatch{Table: "a", Column: "x"}, true},
		{"stored has more columns", Layout{
			{Table: "a", Columns: append(append([]ColumnLayout(nil), running[0].Columns...), col("y", wire.TypeFloat, true))}, running[1],
		}, LayoutMismatch{Table: "a", Column: "y"}, true},
		{"stored lacks a table", Layout{running[0]}, LayoutMismatch{Table: "b", Column: "id"}, true},
		{"stored has an unconfigured table", Layout{running[0], running[1], {Table: "c"}}, LayoutMismatch{Table: "c"}, true},
	}
	for _, tt := range tests {
		got, differ := StoredLayoutMismatch(tt.stored, running)
		if got != tt.want || differ != tt.differ {
			t.Errorf("%s: StoredLayoutMismatch = %+v, %t; want %+v, %t", tt.name, got, differ, tt.want, tt.differ)
		}
	}
}
