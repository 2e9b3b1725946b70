package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		want    Pattern
		ok      bool
	}{
		{"project:{project_id}", Pattern{"project", "project_id"}, true},
		{"a:b:{x}", Pattern{"a:b", "x"}, true},
		{"p q:{v w}", Pattern{"p q", "v w"}, true},
		{"project", Pattern{}, false},
		{"project:project_id", Pattern{}, false},
		{":{x}", Pattern{}, false},
		{"p:{}", Pattern{}, false},
		{"p{:{x}", Pattern{}, false},
		{"p}:{x}", Pattern{}, false},
		{"p:{x}{y}", Pattern{}, false},
		{"p:{x:y}", Pattern{}, false},
		{"p:{x}s", Pattern{}, false},
		{"p{x}", Pattern{}, false},
	}
	for _, tt := range tests {
		got, err := ParsePattern(tt.pattern)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePattern(%q) = %+v, %v; want %+v, ok %t", tt.pattern, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != tt.pattern {
			t.Errorf("ParsePattern(%q).String() = %q", tt.pattern, got.String())
		}
	}
	if got := (Pattern{"project", "project_id"}).Key("p1"); got != "project:p1" {
		t.Errorf("Key = %q, want project:p1", got)
	}
}

func TestRenderValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ  wire.ColumnType
		v    wire.Value
		want string
		ok   bool
	}{
		{wire.TypeString, wire.Value{Str: "p1"}, "p1", true},
		{wire.TypeString, wire.Value{}, "", false},
		{wire.TypeString, wire.Value{Null: true, Str: "x"}, "", false},
		{wire.TypeJSON, wire.Value{Str: `{"a":1}`}, `{"a":1}`, true},
		{wire.TypeBlobRef, wire.Value{Str: `{"id":"b"}`}, `{"id":"b"}`, true},
		{wire.TypeInteger, wire.Value{Int: 0}, "0", true},
		{wire.TypeInteger, wire.Value{Int: -9007199254740991}, "-9007199254740991", true},
		{wire.TypeBoolean, wire.Value{Bool: true}, "true", true},
		{wire.TypeBoolean, wire.Value{}, "false", true},
		{wire.TypeBytes, wire.Value{Bytes: []byte("x")}, "", false},
		{wire.TypeCRDT, wire.Value{Bytes: []byte("x")}, "", false},
		{wire.TypeFloat, wire.Value{Float: 1.5}, "1.5", true},
	}
	for _, tt := range tests {
		got, ok := RenderValue(tt.typ, tt.v)
		if got != tt.want || ok != tt.ok {
			t.Errorf("RenderValue(%s, %+v) = %q, %t; want %q, %t", tt.typ, tt.v, got, ok, tt.want, tt.ok)
		}
	}
}

func TestStoredScopes(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, New(1).
		Table("t", "id", Integer("id"), String("org"), Integer("team"), Boolean("flag").Null()).
		Scope("org:{org}").
		Scope("team:{team}").
		Scope("organization:{org}").
		Scope("flag:{flag}").
		Schema())
	tbl, _ := c.Table("t")
	row := []wire.Value{{Int: 42}, {Str: "o<&>\"1\u2028"}, {Int: 7}, {Bool: false}}

	got, err := tbl.StoredScopes(row)
	if err != nil {
		t.Fatal(err)
	}
	want := StoredScopes{{"org", "o<&>\"1\u2028"}, {"team", "7"}, {"flag", "false"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StoredScopes = %q, want %q", got, want)
	}
	if v, ok := got.Get("team"); !ok || v != "7" {
		t.Errorf("Get(team) = %q, %t", v, ok)
	}
	if m := got.Map(); !reflect.DeepEqual(m, map[string]string{"org": "o<&>\"1\u2028", "team": "7", "flag": "false"}) {
		t.Errorf("Map = %v", m)
	}
	data, err := got.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	// JSON.stringify escapes neither <&> nor U+2028.
	if want := "{\"org\":\"o<&>\\\"1\u2028\",\"team\":\"7\",\"flag\":\"false\"}"; string(data) != want {
		t.Errorf("JSON = %s, want %s", data, want)
	}
	// json.Marshal escapes more, but what it writes reads back the same.
	escaped, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{data, escaped} {
		var back StoredScopes
		if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("Unmarshal(%s) = %q, %v; want %q", data, back, err, got)
		}
	}

	if id, ok := tbl.RowID(row); !ok || id != "42" {
		t.Errorf("RowID = %q, %t; want 42, true", id, ok)
	}

	for name, bad := range map[string][]wire.Value{
		"null":  {{Int: 1}, {Null: true}, {Int: 7}, {}},
		"empty": {{Int: 1}, {Str: ""}, {Int: 7}, {}},
	} {
		_, err := tbl.StoredScopes(bad)
		var missing *MissingScopeError
		if !errors.As(err, &missing) || !errors.Is(err, ErrMissingScope) ||
			err.Error() != `table "t": missing scope value for "org"` {
			t.Errorf("%s: err = %v, want a *MissingScopeError for org", name, err)
		}
	}
	if _, err := tbl.StoredScopes(row[:3]); err == nil {
		t.Error("StoredScopes of a short row succeeded")
	}
	if _, ok := tbl.RowID(nil); ok {
		t.Error("RowID of an empty row succeeded")
	}
}

func TestJSONStringControlCharacters(t *testing.T) {
	t.Parallel()
	// JSON.stringify("\b\f\n\r\t\u0001\u001f\\") in Node.js.
	want := `"\b\f\n\r\t\u0001\u001f\\"`
	if got := string(jsonString("\b\f\n\r\t\x01\x1f\\")); got != want {
		t.Errorf("jsonString = %s, want %s", got, want)
	}
}
