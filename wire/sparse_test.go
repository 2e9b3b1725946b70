package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeSparseCheckOrder(t *testing.T) {
	// id (pk, non-nullable string), a (non-nullable string), b (nullable int)
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "a", Type: TypeString}, {Name: "b", Type: TypeInteger, Nullable: true}}
	c := mustCodec(t, cols, "id")
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		// Each input also carries every later fault, so only the check
		// order decides which one is reported.
		{"presence padding before absent pk", cat(0x0a, 0xff), "presence bitmap has a set padding bit"},
		{"absent pk before null padding", cat(0x02, 0xfe), "missing the primary-key column id"},
		{"null padding before non-nullable", cat(0x03, 0x06), "null bit for an absent column"},
		{"non-nullable before values", cat(0x03, 0x02, u32b(99)), "non-nullable column a"},
		{"truncated presence", nil, "truncated"},
		{"truncated nulls", cat(0x01), "truncated"},
		{"bad value", cat(0x01, 0x00, strb("\xff")), "UTF-8"},
		{"trailing", cat(0x01, 0x00, strb("x"), 0), "trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.DecodeSparse(tt.in)
			var de *DecodeError
			if !errors.As(err, &de) || de.Code != CodeInvalidRequest {
				t.Fatalf("DecodeSparse(%x) err = %v, want a %s DecodeError", tt.in, err, CodeInvalidRequest)
			}
			if !strings.Contains(de.Reason, tt.wantErr) {
				t.Errorf("reason = %q, want it to mention %q", de.Reason, tt.wantErr)
			}
		})
	}
}

func TestSparseRoundTrip(t *testing.T) {
	c := mustCodec(t, testColumns(), "id")
	n := len(testColumns())
	tests := []struct {
		name string
		row  SparseRow
		want []byte
	}{
		{
			name: "pk only",
			row:  SparseRow{Present: []bool{true, false, false, false, false, false, false, false, false, false}, Values: []Value{{Str: "k"}, {}, {}, {}, {}, {}, {}, {}, {}, {}}},
			want: cat(0x01, 0x00, 0x00, strb("k")),
		},
		{
			name: "pk, present null title, blob_ref",
			row: SparseRow{
				Present: []bool{true, true, false, false, false, false, false, false, false, true},
				Values:  []Value{{Str: "k"}, {Null: true}, {}, {}, {}, {}, {}, {}, {}, {Str: `{"blobId":"` + testBlobID + `","byteLength":5}`}},
			},
			want: cat(0x03, 0x02, 0x02, strb("k"), strb(`{"blobId":"`+testBlobID+`","byteLength":5}`)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.AppendSparse(nil, tt.row)
			if err != nil {
				t.Fatalf("AppendSparse: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("AppendSparse = %x, want %x", got, tt.want)
			}
			back, err := c.DecodeSparse(got)
			if err != nil {
				t.Fatalf("DecodeSparse: %v", err)
			}
			if !reflect.DeepEqual(back.Present, tt.row.Present) {
				t.Errorf("Present = %v, want %v", back.Present, tt.row.Present)
			}
			for i := 0; i < n; i++ {
				if back.Present[i] && !reflect.DeepEqual(back.Values[i], tt.row.Values[i]) {
					t.Errorf("Values[%d] = %+v, want %+v", i, back.Values[i], tt.row.Values[i])
				}
			}
		})
	}
}

func TestAppendSparseRefuses(t *testing.T) {
	c := mustCodec(t, testColumns(), "id")
	row := func() SparseRow {
		return SparseRow{Present: make([]bool, 10), Values: make([]Value, 10)}
	}
	tests := []struct {
		name string
		row  SparseRow
	}{
		{"wrong length", SparseRow{Present: make([]bool, 3), Values: make([]Value, 10)}},
		{"absent pk", func() SparseRow { r := row(); r.Present[1] = true; return r }()},
		{"null non-nullable", func() SparseRow {
			r := row()
			r.Present[0], r.Present[2] = true, true
			r.Values[2].Null = true
			return r
		}()},
		{"bad integer", func() SparseRow {
			r := row()
			r.Present[0], r.Present[3] = true, true
			r.Values[3].Int = 1 << 60
			return r
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.AppendSparse([]byte("p"), tt.row)
			var ee *EncodeError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want an *EncodeError", err)
			}
			if string(got) != "p" {
				t.Errorf("dst = %q after a refusal, want it unchanged", got)
			}
		})
	}
	decodeOnly := newColumnCodec(testColumns())
	if _, err := decodeOnly.DecodeSparse(cat(0xff, 0x03, 0x00, 0x00)); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("decode-only codec DecodeSparse err = %v, want %s", err, CodeInvalidRequest)
	}
}
