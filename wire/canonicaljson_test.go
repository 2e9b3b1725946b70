package wire

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, `null`},
		{"bools", []any{true, false}, `[true,false]`},
		{"numbers", []any{1.0, math.Copysign(0, -1), 1e21, int64(-7), 3, json.Number("1.0"), json.Number("-0"), json.Number("1E-7")}, `[1,0,1e+21,-7,3,1,0,1e-7]`},
		{"escapes", "\x00\x1f\b\f\n\r\t\"\\\x7f\u2028\u2029é😀<>&/", `"\u0000\u001f\b\f\n\r\t\"\\` + "\x7f\u2028\u2029é😀<>&/" + `"`},
		{"invalid utf-8", "a\xffb", "\"a\uFFFDb\""},
		{"keys by utf-16", map[string]any{"b": 1.0, "a": []any{true, nil, "x"}, "\uffff": 1.0, "😀": 2.0, "é": 3.0, "A": 4.0, "": 5.0}, `{"":5,"A":4,"a":[true,null,"x"],"b":1,"é":3,"😀":2,"` + "\uffff" + `":1}`},
		{"arrays keep order", map[string][]string{"k": {"b", "a", "b"}}, `{"k":["b","a","b"]}`},
		{"nested", map[string]any{"z": map[string]any{"y": []string{}, "x": []any{}}}, `{"z":{"x":[],"y":[]}}`},
		{"empty object", map[string]any{}, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON(tt.in)
			if err != nil || string(got) != tt.want {
				t.Errorf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestCanonicalJSONRefuses(t *testing.T) {
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	tests := []struct {
		name string
		in   any
	}{
		{"nan", math.NaN()},
		{"inf", []any{math.Inf(-1)}},
		{"unsafe int64", int64(MaxSafeInteger + 1)},
		{"bad number", json.Number("0x10")},
		{"number text", json.Number("Infinity")},
		{"overflow", json.Number("1e400")},
		{"leading zero", json.Number("01")},
		{"unsupported", map[string]any{"a": float32(1)}},
		{"cycle", cyclic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON(tt.in)
			if _, ok := err.(*EncodeError); !ok {
				t.Errorf("got %s, %v; want an *EncodeError", got, err)
			}
		})
	}
}

// The digests were computed with the reference algorithm in Node.js.
func TestScopeDigest(t *testing.T) {
	tests := []struct {
		name      string
		in        map[string][]string
		canonical string
		digest    string
	}{
		{"vector bootstrap-segments", map[string][]string{"project": {"p1"}}, `{"project":["p1"]}`, "5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977"},
		{"sorted and deduplicated",
			map[string][]string{"project": {"p2", "p1", "p1"}, "org": {"o1"}, "\uffff": {"a", "😀", "\uffff"}, "😀": {"b"}},
			`{"org":["o1"],"project":["p1","p2"],"😀":["b"],"` + "\uffff" + `":["a","😀","` + "\uffff" + `"]}`,
			"f61d6dab9c62bce9d5cb770e8f9728c9a251e24ed94911cc5ab78753c12f6318"},
		{"empty", map[string][]string{}, `{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{"nil list", map[string][]string{"a": nil}, `{"a":[]}`, "50e8660084976a10f0b3b9b3a6352d5881cbd219b5587a26224971a60ff2cc55"},
		{"escapes", map[string][]string{"q\"\n": {"\x01"}}, `{"q\"\n":["\u0001"]}`, "fa96d3fe79954fae8e8474349c3eff180030b7e7594c8e8ab3332cd14502145b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(CanonicalScopeJSON(tt.in)); got != tt.canonical {
				t.Errorf("CanonicalScopeJSON = %s, want %s", got, tt.canonical)
			}
			if got := ScopeDigest(tt.in); got != tt.digest {
				t.Errorf("ScopeDigest = %s, want %s", got, tt.digest)
			}
		})
	}
}

func TestCanonicalScopeJSONKeepsInput(t *testing.T) {
	in := map[string][]string{"k": {"b", "a", "b"}}
	_ = CanonicalScopeJSON(in)
	if want := []string{"b", "a", "b"}; !reflect.DeepEqual(in["k"], want) {
		t.Errorf("input mutated to %v", in["k"])
	}
	merged := map[string][]string{"a\xff": {"2"}, "a\xfe": {"1", "2"}}
	if got, want := string(CanonicalScopeJSON(merged)), "{\"a\uFFFD\":[\"1\",\"2\"]}"; got != want {
		t.Errorf("invalid UTF-8 keys: got %s, want %s", got, want)
	}
}

func TestParseScopesHeader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string][]string // nil: a sync.invalid_request error
	}{
		{"canonical", `{"project":["p1"]}`, map[string][]string{"project": {"p1"}}},
		{"loose", ` { "b" : [ "y", "x", "x" ], "a":[] } `, map[string][]string{"a": {}, "b": {"y", "x", "x"}}},
		{"empty object", `{}`, map[string][]string{}},
		{"duplicate keeps last", `{"a":["1"],"a":["2"]}`, map[string][]string{"a": {"2"}}},
		{"latin-1 bytes", "{\"p\":[\"caf\xe9\"]}", map[string][]string{"p": {"café"}}},
		{"utf-8 bytes", `{"p":["café"]}`, map[string][]string{"p": {"café"}}},
		{"empty header", ``, nil},
		{"not json", `{p:[]}`, nil},
		{"array", `[]`, nil},
		{"null", `null`, nil},
		{"null list", `{"a":null}`, nil},
		{"string list", `{"a":"x"}`, nil},
		{"number item", `{"a":[1]}`, nil},
		{"null item", `{"a":[null]}`, nil},
		{"trailing", `{"a":[]} x`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseScopesHeader(tt.in)
			if tt.want == nil {
				if ErrorCode(err) != CodeInvalidRequest {
					t.Errorf("got %v, %v; want a %s error", got, err, CodeInvalidRequest)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
