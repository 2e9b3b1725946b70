package sspclient_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

func TestWireValue(t *testing.T) {
	tests := []struct {
		typ  wire.ColumnType
		in   any
		want wire.Value
		back any // GoValue of want; nil means in
	}{
		{typ: wire.TypeString, in: "a", want: wire.Value{Str: "a"}},
		{typ: wire.TypeString, in: nil, want: wire.Value{Null: true}},
		{typ: wire.TypeInteger, in: int64(-7), want: wire.Value{Int: -7}},
		{typ: wire.TypeInteger, in: 42, want: wire.Value{Int: 42}, back: int64(42)},
		{typ: wire.TypeInteger, in: uint8(3), want: wire.Value{Int: 3}, back: int64(3)},
		{typ: wire.TypeFloat, in: 1.5, want: wire.Value{Float: 1.5}},
		{typ: wire.TypeFloat, in: 2, want: wire.Value{Float: 2}, back: 2.0},
		{typ: wire.TypeBoolean, in: true, want: wire.Value{Bool: true}},
		{typ: wire.TypeJSON, in: `{"a":1}`, want: wire.Value{Str: `{"a":1}`}},
		{typ: wire.TypeJSON, in: json.RawMessage(`[1]`), want: wire.Value{Str: `[1]`}, back: `[1]`},
		{typ: wire.TypeJSON, in: map[string]int{"b": 2}, want: wire.Value{Str: `{"b":2}`}, back: `{"b":2}`},
		{typ: wire.TypeBytes, in: []byte{1, 2}, want: wire.Value{Bytes: []byte{1, 2}}},
		{typ: wire.TypeString, in: wire.Value{Str: "raw"}, want: wire.Value{Str: "raw"}, back: "raw"},
	}
	for _, tc := range tests {
		got, err := sspclient.WireValue(tc.typ, tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("WireValue(%s, %#v) = %+v, %v; want %+v", tc.typ, tc.in, got, err, tc.want)
			continue
		}
		back := tc.back
		if back == nil {
			back = tc.in
		}
		if g := sspclient.GoValue(tc.typ, got); !reflect.DeepEqual(g, back) {
			t.Errorf("GoValue(%s, %+v) = %#v, want %#v", tc.typ, got, g, back)
		}
	}
	for _, bad := range []struct {
		typ wire.ColumnType
		in  any
	}{{wire.TypeInteger, "1"}, {wire.TypeBoolean, 1}, {wire.TypeString, 1}, {wire.TypeBytes, "x"}, {wire.TypeInteger, uint64(1 << 63)}} {
		if _, err := sspclient.WireValue(bad.typ, bad.in); err == nil {
			t.Errorf("WireValue(%s, %#v) accepted", bad.typ, bad.in)
		}
	}
}
