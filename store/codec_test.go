package store

import (
	"encoding/json"
	"slices"
	"testing"
)

// The fast path of DecodeScopes agrees with encoding/json wherever it
// answers, and DecodeScopes never fails on what the general decoder reads.
func FuzzDecodeScopes(f *testing.F) {
	for _, s := range []string{`{}`, `{"list_id":"work"}`, `{"b":"2","a":"1"}`, `{"a":"1","a":"2"}`,
		`{"a":"\u00e9"}`, `{ "a" : "1" }`, `{"list_id": "work", "b": "x"}`, " {\"a\":\"1\"}\n", `{"a":"1",}`, `{"a":1}`, `"{\"a\":\"1\"}"`, `{"a":"x\"y"}`, `{"é":"ü"}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeFlatScopes(b)
		var m map[string]string
		jerr := json.Unmarshal(b, &m)
		if ok {
			if jerr != nil {
				t.Fatalf("fast path read %q, encoding/json refuses it: %v", b, jerr)
			}
			if want := ScopesFromMap(m); !slices.Equal(fast, want) {
				t.Fatalf("fast path %v, encoding/json %v for %q", fast, want, b)
			}
		}
		got, err := DecodeScopes(b)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("DecodeScopes(%q) error %v, encoding/json error %v", b, err, jerr)
		}
		if err == nil && !slices.Equal(got, ScopesFromMap(m)) {
			t.Fatalf("DecodeScopes(%q) = %v, want %v", b, got, ScopesFromMap(m))
		}
	})
}

func TestDecodeScopesFastPath(t *testing.T) {
	// Compact (sqlitestore, the reference) and as Postgres prints JSONB.
	for _, s := range []string{`{}`, `{"list_id":"work"}`, `{"b":"2","a":"1"}`, `{"list_id": "work"}`,
		`{"b": "2", "a": "1"}`, " {\n\t\"a\" :\r\"1\" } ", `{ }`} {
		if _, ok := decodeFlatScopes([]byte(s)); !ok {
			t.Errorf("%s: not on the fast path", s)
		}
	}
	for _, s := range []string{`{"a":"1","a":"2"}`, `{"a":"x\"y"}`, `{"a":1}`, "{\"a\":\"\xff\"}",
		`{"a":"1",}`, `{"a":"1"} x`, `{"a" "1"}`, `{,}`, "{\"a\":\"1\"}\v", `{"a":"1"`} {
		if _, ok := decodeFlatScopes([]byte(s)); ok {
			t.Errorf("%s: taken by the fast path", s)
		}
	}
}
