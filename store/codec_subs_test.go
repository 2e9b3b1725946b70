package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

var subscriptionSeeds = []string{
	`[]`, `null`, `[{}]`,
	`[{"id":"s","table":"tasks","scopes":{"project_id":["p1"]},"schemaVersion":3}]`,
	`[{"id": "s", "table": "tasks", "scopes": {"project_id": ["p1", "p2"]}, "schemaVersion": 1}, {"id": "t", "table": "notes", "scopes": {}}]`,
	`[{"id":"s","table":"tasks","scopes":null}]`, `[{"id":"s","scopes":{"a":null,"b":[]}}]`,
	`[{"id":"s","id":"t"}]`, `[{"ID":"s"}]`, `[{"id":"s\"t"}]`, `[{"id":"é","scopes":{"ü":["ß"]}}]`,
	`[{"schemaVersion":01}]`, `[{"schemaVersion":1.0}]`, `[{"schemaVersion":-1}]`, `[{"schemaVersion":2147483648}]`,
	`[{"schemaVersion":1e2}]`, `[{"id":null}]`, `[{"scopes":{"a":["x"],"a":["y"]}}]`, "[{\"id\":\"\xff\"}]",
	`[{"id":"s"},]`, `[{"id":"s"}] x`, `[{"id":"s"}`, ` [ ] `, `nullx`, `[{"extra":1}]`,
}

// FuzzDecodeSubscriptions: the fast path answers only what encoding/json
// answers the same (nil and empty lists and maps told apart), and
// DecodeSubscriptions errs exactly when encoding/json does.
func FuzzDecodeSubscriptions(f *testing.F) {
	for _, s := range subscriptionSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want []SubscriptionRecord
		jerr := json.Unmarshal(b, &want)
		if fast, ok := decodeFlatSubscriptions(b); ok {
			if jerr != nil {
				t.Fatalf("fast path read %q, encoding/json refuses it: %v", b, jerr)
			}
			if !reflect.DeepEqual(fast, want) {
				t.Fatalf("fast path %#v, encoding/json %#v for %q", fast, want, b)
			}
		}
		got, err := DecodeSubscriptions(b)
		if len(b) == 0 {
			return // no record: no subscriptions
		}
		if (err == nil) != (jerr == nil) {
			t.Fatalf("DecodeSubscriptions(%q) error %v, encoding/json error %v", b, err, jerr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeSubscriptions(%q) = %#v, want %#v", b, got, want)
		}
	})
}

// TestDecodeSubscriptionsFastPath: what the stores write takes the fast
// path, compact and as Postgres prints JSONB; the rest does not.
func TestDecodeSubscriptionsFastPath(t *testing.T) {
	subs := []SubscriptionRecord{{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1", "p2"}, "x": {}}, SchemaVersion: 7},
		{ID: "t", Table: "notes"}}
	enc, err := EncodeSubscriptions(subs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{string(enc), `[]`, `null`,
		`[{"id": "s", "table": "tasks", "scopes": {"project_id": ["p1"]}, "schemaVersion": 1}]`} {
		if _, ok := decodeFlatSubscriptions([]byte(s)); !ok {
			t.Errorf("%s: not on the fast path", s)
		}
	}
	if got, _ := decodeFlatSubscriptions(enc); !reflect.DeepEqual(got, subs) {
		t.Errorf("round trip: %#v, want %#v", got, subs)
	}
	for _, s := range []string{`[{"id":"s","id":"t"}]`, `[{"ID":"s"}]`, `[{"id":"s\"t"}]`, `[{"schemaVersion":01}]`,
		`[{"schemaVersion":1.5}]`, `[{"schemaVersion":-1}]`, `[{"id":null}]`, "[{\"id\":\"\xff\"}]", `[{"id":"s"},]`, `[{"extra":1}]`} {
		if _, ok := decodeFlatSubscriptions([]byte(s)); ok {
			t.Errorf("%s: taken by the fast path", s)
		}
	}
}

// BenchmarkDecodeSubscriptions: a client record's subscription list (one
// subscription, as most clients have), by the fast path and by
// encoding/json.
func BenchmarkDecodeSubscriptions(b *testing.B) {
	enc := []byte(`[{"id":"tasks","table":"tasks","scopes":{"project_id":["p1"]},"schemaVersion":1}]`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeSubscriptions(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var subs []SubscriptionRecord
			if err := json.Unmarshal(enc, &subs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
