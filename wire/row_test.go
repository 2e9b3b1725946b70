package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// testColumns is the push-vector table plus a blob_ref column.
func testColumns() []Column {
	return []Column{
		{Name: "id", Type: TypeString},
		{Name: "title", Type: TypeString, Nullable: true},
		{Name: "body", Type: TypeString},
		{Name: "count", Type: TypeInteger, Nullable: true},
		{Name: "score", Type: TypeFloat},
		{Name: "done", Type: TypeBoolean},
		{Name: "meta", Type: TypeJSON, Nullable: true},
		{Name: "blob", Type: TypeBytes, Nullable: true},
		{Name: "doc", Type: TypeCRDT, Nullable: true},
		{Name: "att", Type: TypeBlobRef, Nullable: true},
	}
}

func mustCodec(t testing.TB, cols []Column, pk string) *RowCodec {
	t.Helper()
	c, err := NewRowCodec(cols, pk)
	if err != nil {
		t.Fatalf("NewRowCodec: %v", err)
	}
	return c
}

// cat concatenates byte pieces; strings become raw bytes.
func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		case byte:
			b = append(b, v)
		case int:
			b = append(b, byte(v))
		}
	}
	return b
}

func u32b(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64b(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func strb(s string) []byte { return append(u32b(uint32(len(s))), s...) }

const testBlobID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDecodeRowEdgeCases(t *testing.T) {
	one := func(typ ColumnType, nullable bool) []Column {
		return []Column{{Name: "v", Type: typ, Nullable: nullable}}
	}
	nine := make([]Column, 9)
	for i := range nine {
		nine[i] = Column{Name: string(rune('a' + i)), Type: TypeBoolean, Nullable: true}
	}
	tests := []struct {
		name    string
		cols    []Column
		in      []byte
		want    []Value
		wantErr string // substring of the reason; "" = success
	}{
		{"null ok", one(TypeString, true), cat(0x01), []Value{{Null: true}}, ""},
		{"padding bit", one(TypeString, true), cat(0x02, strb("x")), nil, "padding"},
		{"padding bit on 9 columns", nine, cat(0xff, 0x03), nil, "padding"},
		{"9 columns all null", nine, cat(0xff, 0x01), []Value{{Null: true}, {Null: true}, {Null: true},
			{Null: true}, {Null: true}, {Null: true}, {Null: true}, {Null: true}, {Null: true}}, ""},
		{"null on non-nullable", one(TypeString, false), cat(0x01), nil, "non-nullable"},
		{"i64 max", one(TypeInteger, false), cat(0, u64b(MaxSafeInteger)), []Value{{Int: MaxSafeInteger}}, ""},
		{"i64 min", one(TypeInteger, false), cat(0, u64b(uint64(-MaxSafeInteger&(1<<64-1)))), []Value{{Int: -MaxSafeInteger}}, ""},
		{"i64 2^53", one(TypeInteger, false), cat(0, u64b(1<<53)), nil, "outside"},
		{"i64 -2^53", one(TypeInteger, false), cat(0, u64b(uint64(1<<64-1<<53))), nil, "outside"},
		{"bool 2", one(TypeBoolean, false), cat(0, 2), nil, "bool"},
		{"string", one(TypeString, false), cat(0, strb("déjà 𝄞")), []Value{{Str: "déjà 𝄞"}}, ""},
		{"invalid utf-8", one(TypeString, false), cat(0, strb("a\xffb")), nil, "UTF-8"},
		{"json scalar", one(TypeJSON, false), cat(0, strb("7")), []Value{{Str: "7"}}, ""},
		{"json spaced", one(TypeJSON, false), cat(0, strb(`{ "a" : [1, 2] }`)), []Value{{Str: `{ "a" : [1, 2] }`}}, ""},
		{"bad json", one(TypeJSON, false), cat(0, strb("{not json")), nil, "JSON"},
		{"empty json", one(TypeJSON, false), cat(0, strb("")), nil, "JSON"},
		{"blob_ref", one(TypeBlobRef, false), cat(0, strb(`{"blobId":"`+testBlobID+`","byteLength":3}`)),
			[]Value{{Str: `{"blobId":"` + testBlobID + `","byteLength":3}`}}, ""},
		{"blob_ref bad shape", one(TypeBlobRef, false), cat(0, strb(`{"byteLength":3}`)), nil, "BlobRef"},
		{"blob_ref not json", one(TypeBlobRef, false), cat(0, strb(`{`)), nil, "BlobRef"},
		{"bytes empty", one(TypeBytes, false), cat(0, u32b(0)), []Value{{Bytes: []byte{}}}, ""},
		{"crdt", one(TypeCRDT, false), cat(0, u32b(2), 0xfe, 0xff), []Value{{Bytes: []byte{0xfe, 0xff}}}, ""},
		{"trailing byte", one(TypeBoolean, false), cat(0, 1, 0), nil, "trailing"},
		{"truncated value", one(TypeInteger, false), cat(0, 1, 2, 3), nil, "truncated"},
		{"truncated bitmap", one(TypeInteger, false), nil, nil, "truncated"},
		{"string length past end", one(TypeString, false), cat(0, u32b(1<<31)), nil, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newColumnCodec(tt.cols)
			got, err := c.DecodeRow(tt.in)
			if tt.wantErr != "" {
				var de *DecodeError
				if !errors.As(err, &de) || de.Code != CodeInvalidRequest {
					t.Fatalf("DecodeRow(%x) err = %v, want a %s DecodeError", tt.in, err, CodeInvalidRequest)
				}
				if !strings.Contains(de.Reason, tt.wantErr) {
					t.Errorf("reason = %q, want it to mention %q", de.Reason, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeRow(%x): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeRow(%x) = %+v, want %+v", tt.in, got, tt.want)
			}
			enc, err := c.AppendRow(nil, got)
			if err != nil {
				t.Fatalf("AppendRow: %v", err)
			}
			if !bytes.Equal(enc, tt.in) {
				t.Errorf("AppendRow = %x, want %x", enc, tt.in)
			}
		})
	}
}

func TestRowFloatBitsPreserved(t *testing.T) {
	c := newColumnCodec([]Column{{Name: "f", Type: TypeFloat}})
	for _, bits := range []uint64{0x7ff8000000000001, 0xfff0000000000000, 0x7ff0000000000000, 0x8000000000000000, 1} {
		in := cat(0, u64b(bits))
		vals, err := c.DecodeRow(in)
		if err != nil {
			t.Fatalf("DecodeRow(%x): %v", in, err)
		}
		if got := math.Float64bits(vals[0].Float); got != bits {
			t.Errorf("bits = %#x, want %#x", got, bits)
		}
		out, err := c.AppendRow(nil, vals)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("AppendRow = %x, %v; want %x", out, err, in)
		}
	}
}

func TestAppendRowRefuses(t *testing.T) {
	c := mustCodec(t, testColumns(), "id")
	valid := func() []Value {
		return []Value{{Str: "n-1"}, {Null: true}, {Str: "b"}, {Int: 7}, {Float: 0.5}, {Bool: true},
			{Str: `{"k":1}`}, {Bytes: []byte{1}}, {Null: true}, {Str: `{"blobId":"` + testBlobID + `","byteLength":0}`}}
	}
	if _, err := c.AppendRow(nil, valid()); err != nil {
		t.Fatalf("valid row refused: %v", err)
	}
	tests := []struct {
		name   string
		mutate func([]Value) []Value
	}{
		{"short row", func(v []Value) []Value { return v[:3] }},
		{"null in non-nullable", func(v []Value) []Value { v[2] = Value{Null: true}; return v }},
		{"i64 2^53", func(v []Value) []Value { v[3].Int = 1 << 53; return v }},
		{"i64 -2^53", func(v []Value) []Value { v[3].Int = -1 << 53; return v }},
		{"invalid utf-8", func(v []Value) []Value { v[0].Str = "\xc3"; return v }},
		{"invalid json", func(v []Value) []Value { v[6].Str = "{"; return v }},
		{"invalid blob_ref", func(v []Value) []Value { v[9].Str = `{"blobId":"x","byteLength":0}`; return v }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("prefix")
			got, err := c.AppendRow(dst, tt.mutate(valid()))
			var ee *EncodeError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want an *EncodeError", err)
			}
			if string(got) != "prefix" {
				t.Errorf("dst = %q after a refusal, want it unchanged", got)
			}
		})
	}
}

func TestNewRowCodec(t *testing.T) {
	cols := testColumns()
	tests := []struct {
		name string
		cols []Column
		pk   string
		ok   bool
	}{
		{"ok", cols, "id", true},
		{"integer pk", []Column{{Name: "n", Type: TypeInteger}}, "n", true},
		{"no pk", cols, "", false},
		{"unknown pk", cols, "nope", false},
		{"float pk", cols, "score", false},
		{"bytes pk", cols, "blob", false},
		{"blob_ref pk", cols, "att", false},
		{"crdt pk", cols, "doc", false},
		{"duplicate name", []Column{{Name: "id", Type: TypeString}, {Name: "id", Type: TypeString}}, "id", false},
		{"bad type", []Column{{Name: "id", Type: TypeString}, {Name: "x", Type: 9}}, "id", false},
		{"zero type", []Column{{Name: "id", Type: 0}}, "id", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewRowCodec(tt.cols, tt.pk)
			if (err == nil) != tt.ok {
				t.Fatalf("NewRowCodec err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && c.Columns()[c.PrimaryKey()].Name != tt.pk {
				t.Errorf("PrimaryKey() = %d, not column %q", c.PrimaryKey(), tt.pk)
			}
		})
	}
}

func TestValidBlobRef(t *testing.T) {
	id := `"blobId":"` + testBlobID + `"`
	tests := []struct {
		in   string
		want bool
	}{
		{`{` + id + `,"byteLength":0}`, true},
		{`{` + id + `,"byteLength":9007199254740991}`, true},
		{`{` + id + `,"byteLength":12,"mediaType":"image/png"}`, true},
		{`{` + id + `,"byteLength":12,"name":"a \"b\" \u00e9.png"}`, true},
		{`{` + id + `,"byteLength":12,"mediaType":"","name":"x\\u0041\\n"}`, true},
		{`{` + id + `,"byteLength":9007199254740992}`, false},
		{`{` + id + `,"byteLength":-1}`, false},
		{`{` + id + `,"byteLength":1.0}`, false},
		{`{` + id + `,"byteLength":1e3}`, false},
		{`{` + id + `,"byteLength":01}`, false},
		{`{` + id + `,"byteLength":"1"}`, false},
		{`{` + id + `}`, false},
		{`{"byteLength":1,` + id + `}`, false},
		{`{` + id + `,"byteLength":1,"name":"a","mediaType":"b"}`, false},
		{`{` + id + `,"byteLength":1,"mediaType":1}`, false},
		{`{` + id + `,"byteLength":1,"mediaType":null}`, false},
		{`{` + id + `,"byteLength":1,"extra":"x"}`, false},
		{`{` + id + `,"byteLength":1,"name":"a","name":"a"}`, false},
		{`{` + id + `,"byteLength":1,"name":"bad\q"}`, false},
		{`{` + id + `,"byteLength":1,"name":"tab	"}`, false},
		{`{` + id + `,"byteLength":1,"name":"\u12"}`, false},
		{`{` + id + `,"byteLength":1,"name":"open}`, false},
		{`{ ` + id + `,"byteLength":1}`, false},
		{`{` + id + `, "byteLength":1}`, false},
		{`{` + id + `,"byteLength":1} `, false},
		{`{"blobId":"sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef","byteLength":1}`, false},
		{`{"blobId":"sha256:0123","byteLength":1}`, false},
		{`{"blobId":"md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","byteLength":1}`, false},
		{`{` + id + `,"byteLength":1,"name":"` + "\xff" + `"}`, false},
		{`null`, false},
		{``, false},
	}
	for _, tt := range tests {
		if got := ValidBlobRef(tt.in); got != tt.want {
			t.Errorf("ValidBlobRef(%s) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
