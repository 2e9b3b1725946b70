package remotewire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	values := []any{
		nil, true, false, 1.5, 0.0, -3.0, "x", "", "<&>\u2028", int64(42), int64(math.MinInt64), int64(math.MaxInt64),
		[]byte{}, []byte{0, 1, 255}, []any{}, []any{nil, "a", []any{int64(1)}},
		Object{}, Object{{"b", 1.0}, {"a", Object{{"nested", []byte("hi")}}}},
	}
	for _, v := range values {
		b, err := Encode(nil, v)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", v, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s): %v", b, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("round trip of %#v gave %#v (wire %s)", v, got, b)
		}
	}
}

func TestEncodeForms(t *testing.T) {
	cases := map[string]any{
		`{"t":"null"}`:                                      nil,
		`{"t":"boolean","v":true}`:                          true,
		`{"t":"number","v":1.5}`:                            1.5,
		`{"t":"number","v":7}`:                              7,
		`{"t":"string","v":"x"}`:                            "x",
		`{"t":"integer","v":"42"}`:                          int64(42),
		`{"t":"bytes","v":"AAE="}`:                          []byte{0, 1},
		`{"t":"array","v":[{"t":"null"}]}`:                  []any{nil},
		`{"t":"object","v":[["k",{"t":"string","v":"v"}]]}`: Object{{"k", "v"}},
	}
	for want, v := range cases {
		b, err := Encode(nil, v)
		if err != nil || string(b) != want {
			t.Errorf("Encode(%#v) = %s, %v; want %s", v, b, err, want)
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), struct{}{}, map[string]any{}} {
		if _, err := Encode(nil, bad); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Encode(%#v): err %v, want ErrUnsupported", bad, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	bad := []string{
		``, `null`, `[]`, `"x"`, `{}`, `{"t":"nope"}`, `{"t":1}`,
		`{"t":"boolean"}`, `{"t":"boolean","v":"true"}`, `{"t":"boolean","v":null}`,
		`{"t":"number","v":"1"}`, `{"t":"number","v":null}`, `{"t":"number","v":1e999}`,
		`{"t":"string"}`, `{"t":"string","v":null}`, `{"t":"string","v":1}`,
		`{"t":"integer","v":42}`, `{"t":"integer","v":"042"}`, `{"t":"integer","v":"-0"}`, `{"t":"integer","v":"+1"}`,
		`{"t":"integer","v":"9223372036854775808"}`, `{"t":"integer","v":""}`, `{"t":"integer","v":"1.0"}`,
		`{"t":"bytes","v":"AAE"}`, `{"t":"bytes","v":"AAF="}`, `{"t":"bytes","v":"A A="}`,
		`{"t":"array","v":{}}`, `{"t":"array","v":[1]}`,
		`{"t":"object","v":{}}`, `{"t":"object","v":[["k"]]}`, `{"t":"object","v":[[1,{"t":"null"}]]}`,
		`{"t":"object","v":[["k",{"t":"null"}],["k",{"t":"null"}]]}`, `{"t":"object","v":["k"]}`,
		"\xff",
	}
	for _, b := range bad {
		if v, err := Decode([]byte(b)); err == nil {
			t.Errorf("Decode(%s) = %#v, want an error", b, v)
		}
	}
	deep := strings.Repeat(`{"t":"array","v":[`, MaxDepth+2) + `{"t":"null"}` + strings.Repeat("]}", MaxDepth+2)
	if _, err := Decode([]byte(deep)); err == nil {
		t.Error("a value nested past MaxDepth decoded")
	}
}

func TestDecodeRequest(t *testing.T) {
	msg := Object{{"revision", 1}, {"kind", "command"}, {"clientId", "c1"}, {"operationId", "op"},
		{"requestId", "r1"}, {"params", Object{{"n", int64(3)}}}}
	b, _ := Encode(nil, msg)
	r, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindCommand || r.ClientID != "c1" || r.OperationID != "op" || r.RequestID != "r1" {
		t.Fatalf("decoded %+v", r)
	}
	if p, ok := r.Params.(Object); !ok || p[0].Value != int64(3) {
		t.Fatalf("params %#v", r.Params)
	}
	for _, bad := range []Object{
		{{"revision", 2}, {"kind", "query"}, {"clientId", "c"}, {"operationId", "o"}},
		{{"kind", "query"}, {"clientId", "c"}, {"operationId", "o"}},
		{{"revision", 1}, {"kind", "watch"}, {"clientId", "c"}, {"operationId", "o"}},
		{{"revision", 1}, {"kind", "query"}, {"clientId", ""}, {"operationId", "o"}},
		{{"revision", 1}, {"kind", "query"}, {"clientId", "c"}},
		{{"revision", 1}, {"kind", "command"}, {"clientId", "c"}, {"operationId", "o"}},
		{{"revision", 1}, {"kind", "command"}, {"clientId", "c"}, {"operationId", "o"}, {"requestId", int64(1)}},
	} {
		b, _ := Encode(nil, bad)
		if _, err := DecodeRequest(b); err == nil {
			t.Errorf("DecodeRequest(%s) succeeded", b)
		}
	}
}

func TestMarshalResponses(t *testing.T) {
	b, err := Marshal(&CommandResponse{OperationID: "op", RequestID: "r", Status: "applied", CommitSeq: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"command"}],` +
		`["operationId",{"t":"string","v":"op"}],["requestId",{"t":"string","v":"r"}],["status",{"t":"string","v":"applied"}],` +
		`["commitSeq",{"t":"number","v":4}],["results",{"t":"array","v":[]}]]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	b, _ = Marshal(&QueryResponse{OperationID: "q", Rows: []Object{{{"id", "a"}}}, MaxCommitSeq: 0})
	if !bytes.Contains(b, []byte(`["maxCommitSeq",{"t":"number","v":0}]`)) {
		t.Fatalf("query response %s", b)
	}
}

// FuzzDecode: no input panics, and every accepted value re-encodes to text
// that decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"t":"null"}`, `{"t":"object","v":[["a",{"t":"integer","v":"-5"}]]}`,
		`{"t":"array","v":[{"t":"bytes","v":"AAE="},{"t":"number","v":-1.5e3}]}`, `{"t":"string","v":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			return
		}
		b, err := Encode(nil, v)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", v, err)
		}
		again, err := Decode(b)
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("re-encoded %s decodes to %#v, %v; want %#v", b, again, err, v)
		}
		checkMessages(t, data)
	})
}

// FuzzDecodeMessages: operation requests and watch messages are refused
// with a *DecodeError (operation.invalid_request) or carry the fields
// their kind requires, the params of the decoded value, and (watch
// messages) the watchId WatchIDOf reads.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{
		`{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"command"}],["clientId",{"t":"string","v":"c1"}],["operationId",{"t":"string","v":"op"}],["requestId",{"t":"string","v":"r1"}],["params",{"t":"object","v":[["n",{"t":"integer","v":"5"}]]}]]}`,
		`{"t":"object","v":[["revision",{"t":"integer","v":"1"}],["kind",{"t":"string","v":"query"}],["clientId",{"t":"string","v":"c"}],["operationId",{"t":"string","v":"q"}]]}`,
		`{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"watch"}],["watchId",{"t":"string","v":"w"}],["clientId",{"t":"string","v":"c"}],["operationId",{"t":"string","v":"q"}],["params",{"t":"null"}]]}`,
		`{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"unwatch"}],["watchId",{"t":"string","v":"w"}]]}`,
		`{"t":"object","v":[["revision",{"t":"number","v":2}],["kind",{"t":"string","v":"query"}]]}`,
		`{"T":"object","V":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkMessages)
}

func checkMessages(t *testing.T, data []byte) {
	var de *DecodeError
	v, verr := Decode(data)
	var params any
	if obj, ok := v.(Object); ok {
		params, _ = obj.Get("params")
	}
	r, err := DecodeRequest(data)
	if err != nil {
		if !errors.As(err, &de) {
			t.Fatalf("request error %v is not a *DecodeError", err)
		}
	} else {
		if verr != nil || r.ClientID == "" || r.OperationID == "" || (r.Kind == KindCommand) != (r.RequestID != "") ||
			(r.Kind != KindQuery && r.Kind != KindCommand) || !reflect.DeepEqual(r.Params, params) {
			t.Fatalf("%q decodes as the request %+v", data, r)
		}
	}
	m, err := DecodeWatchMessage(data)
	if err != nil {
		if !errors.As(err, &de) {
			t.Fatalf("watch error %v is not a *DecodeError", err)
		}
		return
	}
	if verr != nil || m.WatchID == "" || m.WatchID != WatchIDOf(data) {
		t.Fatalf("%q decodes as the watch message %+v (WatchIDOf %q)", data, m, WatchIDOf(data))
	}
	switch m.Kind {
	case KindWatch:
		if m.ClientID == "" || m.OperationID == "" || !reflect.DeepEqual(m.Params, params) {
			t.Fatalf("%q decodes as the watch %+v", data, m)
		}
	case KindUnwatch:
	default:
		t.Fatalf("%q decodes as a watch message of kind %q", data, m.Kind)
	}
}

// TestReferenceVector decodes a request that the reference codec
// (encodeRemoteOperationRequest of @syncular/core, run with bun) encoded,
// and checks that a response encoded here is text that codec decodes
// (the expected decoding below is what it printed).
func TestReferenceVector(t *testing.T) {
	ref := `{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"command"}],["clientId",{"t":"string","v":"c1"}],["operationId",{"t":"string","v":"op"}],["requestId",{"t":"string","v":"r1"}],["params",{"t":"object","v":[["n",{"t":"integer","v":"5"}],["f",{"t":"number","v":1.5}],["b",{"t":"bytes","v":"AAH/"}],["s",{"t":"string","v":"x\u2028<"}],["a",{"t":"array","v":[{"t":"null"},{"t":"boolean","v":true},{"t":"object","v":[["k",{"t":"string","v":"v"}]]}]}]]}]]}`
	r, err := DecodeRequest([]byte(ref))
	if err != nil {
		t.Fatal(err)
	}
	want := Object{{"n", int64(5)}, {"f", 1.5}, {"b", []byte{0, 1, 255}}, {"s", "x\u2028<"},
		{"a", []any{nil, true, Object{{"k", "v"}}}}}
	if r.Kind != KindCommand || r.RequestID != "r1" || !reflect.DeepEqual(r.Params, want) {
		t.Fatalf("decoded %+v", r)
	}
	b, err := Marshal(&QueryResponse{OperationID: "q", Rows: []Object{{{"id", "a"}, {"n", 3.0}, {"b", []byte{1, 2}}, {"x", nil}}}, MaxCommitSeq: 9})
	if err != nil {
		t.Fatal(err)
	}
	// The reference decoded exactly this text to
	// {"revision":1,"kind":"query","operationId":"q","rows":[{"id":"a","n":3,"b":[1,2],"x":null}],"maxCommitSeq":9}.
	const decodedByReference = `{"t":"object","v":[["revision",{"t":"number","v":1}],["kind",{"t":"string","v":"query"}],["operationId",{"t":"string","v":"q"}],["rows",{"t":"array","v":[{"t":"object","v":[["id",{"t":"string","v":"a"}],["n",{"t":"number","v":3}],["b",{"t":"bytes","v":"AQI="}],["x",{"t":"null"}]]}]}],["maxCommitSeq",{"t":"number","v":9}]]}`
	if string(b) != decodedByReference {
		t.Fatalf("encoded %s", b)
	}
}

// TestDecodeMemberCase: the tag and payload members are "t" and "v"
// exactly (encoding/json's struct matching took "T" and "V" too).
func TestDecodeMemberCase(t *testing.T) {
	for _, s := range []string{`{"T":"null"}`, `{"t":"string","V":"x"}`, `{"T":"string","v":"x"}`} {
		if v, err := Decode([]byte(s)); err == nil {
			t.Errorf("%s decodes as %#v", s, v)
		}
	}
	if v, err := Decode([]byte(`{"t":"string","v":"x"}`)); err != nil || v != "x" {
		t.Errorf("a string: %#v, %v", v, err)
	}
}
