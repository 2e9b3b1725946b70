package schema

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseJSON: a schema IR document either fails to parse or parses to
// a value that marshals to a document parsing to the same value, whose
// marshalling is then stable; what parses compiles or fails, never panics,
// and a compiled schema's layout round-trips through its stored form.
func FuzzParseJSON(f *testing.F) {
	for _, p := range []string{"../examples/schema.json", "../deploy/schema.json", "../internal/cli/demo_schema.json"} {
		if b, err := os.ReadFile(filepath.FromSlash(p)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"version":1,"tables":[{"name":"t","primaryKey":"id","columns":[{"name":"id","type":"string"}],"scopes":[{"pattern":"p:{id}","column":"id"}]}]}`))
	f.Add([]byte(`{"version":1,"tables":[],"version":2}`))
	f.Add([]byte(`{"version":1.5,"tables":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseJSON(data)
		if err != nil {
			return
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("a parsed schema does not marshal: %v", err)
		}
		again, err := ParseJSON(enc)
		if err != nil {
			t.Fatalf("the marshalling %s of %q does not parse: %v", enc, data, err)
		}
		if !reflect.DeepEqual(normalizeSchema(again), normalizeSchema(s)) {
			t.Fatalf("round trip of %q through %s:\n got %#v\nwant %#v", data, enc, again, s)
		}
		if enc2, err := json.Marshal(again); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("marshalling not stable: %s, then %s (%v)", enc, enc2, err)
		}
		c, err := Compile(s)
		if err != nil {
			return
		}
		l := c.Layout()
		lb, err := l.MarshalJSON()
		if err != nil {
			t.Fatalf("the layout of a compiled schema does not marshal: %v", err)
		}
		back, err := ParseLayout(lb)
		if err != nil || !reflect.DeepEqual(back, l) {
			t.Fatalf("layout %s reads back as %+v, %v; want %+v", lb, back, err, l)
		}
	})
}

// normalizeSchema makes empty and nil slices alike through a JSON round
// trip of their reflection (the marshalling omits empty lists).
func normalizeSchema(s *Schema) any {
	b, _ := json.Marshal(s)
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// FuzzParseLayout: a stored layout marker parses to a layout that
// marshals to a marker reading back the same, or fails.
func FuzzParseLayout(f *testing.F) {
	f.Add([]byte(`{"items":[{"name":"id","type":"string","nullable":false},{"name":"n","type":"integer","nullable":true}]}`))
	f.Add([]byte(`{"a":[],"b":[{"name":"x","type":"json","nullable":false,"extra":1}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Add([]byte(`{"a":[{"name":"x","type":"nope"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayout(data)
		if err != nil {
			return
		}
		enc, err := l.MarshalJSON()
		if err != nil {
			t.Fatalf("a parsed layout does not marshal: %v", err)
		}
		again, err := ParseLayout(enc)
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("layout %q, marshalled %s, reads back as %+v, %v; want %+v", data, enc, again, err, l)
		}
	})
}

// FuzzStoredScopes: stored scopes read back from a row's JSON keep their
// order and values through MarshalJSON, which agrees with encoding/json on
// the strings.
func FuzzStoredScopes(f *testing.F) {
	f.Add([]byte(`{"project":"p1","org":"o"}`))
	f.Add([]byte(`{"a":"\u2028<&>","b":""}`))
	f.Add([]byte(`{"a":"x","a":"y"}`))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s StoredScopes
		if err := s.UnmarshalJSON(data); err != nil {
			return
		}
		enc, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var again StoredScopes
		if err := again.UnmarshalJSON(enc); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("scopes %q, marshalled %s, read back as %v, %v; want %v", data, enc, again, err, s)
		}
		var m map[string]string
		if err := json.Unmarshal(enc, &m); err != nil {
			t.Fatalf("marshalled scopes %s are not JSON: %v", enc, err)
		}
		for _, sv := range s {
			if m[sv.Variable] != sv.Value {
				t.Fatalf("encoding/json reads %s as %v", enc, m)
			}
		}
	})
}
