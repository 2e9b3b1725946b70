package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// smallSegment returns a two-column segment of n rows with the given
// block sizes (their sum must be n).
func smallSegment(t testing.TB, blockSizes ...int) *Segment {
	t.Helper()
	h := SegmentHeader{Table: "t", SchemaVersion: 3, Columns: []Column{
		{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger, Nullable: true},
	}}
	c := mustCodec(t, h.Columns, "id")
	s := &Segment{Header: h}
	k := 0
	for _, size := range blockSizes {
		var block []SegmentRow
		for range size {
			k++
			row, err := c.AppendRow(nil, []Value{{Str: strings.Repeat("x", k)}, {Int: int64(k)}})
			if err != nil {
				t.Fatal(err)
			}
			block = append(block, SegmentRow{ServerVersion: int64(k), Row: row})
		}
		s.Blocks = append(s.Blocks, block)
	}
	return s
}

func blockSizes(s *Segment) []int {
	var out []int
	for _, b := range s.Blocks {
		out = append(out, len(b))
	}
	return out
}

func TestSegmentWriterBlockSplits(t *testing.T) {
	src := smallSegment(t, 7)
	tests := []struct {
		name       string
		rows, size int
		want       []int
	}{
		{"defaults", 0, 0, []int{7}},
		{"two rows", 2, 0, []int{2, 2, 2, 1}},
		{"one row", 1, 0, []int{1, 1, 1, 1, 1, 1, 1}},
		// Row record k is 8 + 1 + 4+k + 8 bytes = 21+k: 22, 23, 24, ...;
		// a block is cut before a record that would take it past the target.
		{"byte target", 0, 50, []int{2, 2, 1, 1, 1}},
		{"byte target below one row", 0, 1, []int{1, 1, 1, 1, 1, 1, 1}},
		{"byte target wide", 0, 70, []int{3, 2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			sw, err := NewSegmentWriter(&buf, src.Header)
			if err != nil {
				t.Fatal(err)
			}
			sw.BlockRows, sw.BlockBytes = tt.rows, tt.size
			for _, row := range src.Blocks[0] {
				if err := sw.WriteRow(row.ServerVersion, row.Row); err != nil {
					t.Fatal(err)
				}
			}
			if err := sw.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := DecodeSegment(buf.Bytes())
			if err != nil {
				t.Fatalf("DecodeSegment: %v", err)
			}
			if sizes := blockSizes(got); !reflect.DeepEqual(sizes, tt.want) {
				t.Errorf("block sizes = %v, want %v", sizes, tt.want)
			}
			enc, err := EncodeSegment(got)
			if err != nil || !bytes.Equal(enc, buf.Bytes()) {
				t.Errorf("EncodeSegment round trip differs (err %v)", err)
			}
		})
	}
}

// TestSegmentWriterReproducesVector rebuilds rows-two-blocks with WriteRow
// and a two-row block target.
func TestSegmentWriterReproducesVector(t *testing.T) {
	bin := readVector(t, filepath.Join(rowsVectorsRoot(t), "segment"), "rows-two-blocks.bin")
	seg, err := DecodeSegment(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sw, err := NewSegmentWriter(&buf, seg.Header)
	if err != nil {
		t.Fatal(err)
	}
	sw.BlockRows = 2
	for _, block := range seg.Blocks {
		for _, row := range block {
			if err := sw.WriteRow(row.ServerVersion, row.Row); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), bin) {
		t.Errorf("bytes differ\n got: %x\nwant: %x", buf.Bytes(), bin)
	}
}

func TestSegmentWriterRefuses(t *testing.T) {
	src := smallSegment(t, 1)
	var buf bytes.Buffer
	sw, err := NewSegmentWriter(&buf, src.Header)
	if err != nil {
		t.Fatal(err)
	}
	row := src.Blocks[0][0].Row
	var ee *EncodeError
	if err := sw.WriteRow(0, row); !errors.As(err, &ee) {
		t.Errorf("serverVersion 0: err = %v, want *EncodeError", err)
	}
	if err := sw.WriteRow(1<<53, row); !errors.As(err, &ee) {
		t.Errorf("serverVersion 2^53: err = %v, want *EncodeError", err)
	}
	if err := sw.WriteRow(1, row[:len(row)-1]); !errors.As(err, &ee) {
		t.Errorf("truncated row: err = %v, want *EncodeError", err)
	}
	if err := sw.WriteBlock(nil); !errors.As(err, &ee) {
		t.Errorf("empty block: err = %v, want *EncodeError", err)
	}
	if err := sw.WriteRow(1, row); err != nil {
		t.Fatalf("valid row after refusals: %v", err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sw.WriteRow(2, row); err == nil {
		t.Error("WriteRow after Close succeeded")
	}
	if _, err := DecodeSegment(buf.Bytes()); err != nil {
		t.Errorf("output after refusals does not decode: %v", err)
	}
	if _, err := NewSegmentWriter(&buf, SegmentHeader{Columns: []Column{{Name: "x", Type: 9}}}); err == nil {
		t.Error("NewSegmentWriter accepted type tag 9")
	}
	if _, err := NewSegmentWriter(iotest.TruncateWriter(io.Discard, 0), src.Header); err != nil {
		t.Errorf("NewSegmentWriter on a discarding writer: %v", err)
	}
}

func TestEncodeSegmentRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Segment)
	}{
		{"empty block", func(s *Segment) { s.Blocks = append(s.Blocks, nil) }},
		{"serverVersion 0", func(s *Segment) { s.Blocks[0][0].ServerVersion = 0 }},
		{"invalid row", func(s *Segment) { s.Blocks[0][0].Row = []byte{0x03} }},
		{"bad type", func(s *Segment) { s.Header.Columns[0].Type = 0 }},
		{"bad table", func(s *Segment) { s.Header.Table = "\xff" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := smallSegment(t, 2)
			tt.mutate(s)
			var ee *EncodeError
			if _, err := EncodeSegment(s); !errors.As(err, &ee) {
				t.Errorf("err = %v, want *EncodeError", err)
			}
		})
	}
}

// TestDecodeSegmentStructure corrupts a valid segment in every way §5.2
// lists and checks all three decoders refuse it with sync.invalid_request.
func TestDecodeSegmentStructure(t *testing.T) {
	good, err := EncodeSegment(smallSegment(t, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	// Layout: 8 prefix, table str "t" (5), i32 (4), u16 count (2),
	// "id" record 4+2+2, "n" record 4+1+2 → header ends at 34.
	const hdrEnd = 34
	set := func(off int, v ...byte) func([]byte) []byte {
		return func(b []byte) []byte { copy(b[off:], v); return b }
	}
	tests := []struct {
		name    string
		corrupt func([]byte) []byte
		reason  string
	}{
		{"bad magic", set(0, 'S', 'S', 'G', '1'), "magic"},
		{"format version 2", set(4, 2), "formatVersion"},
		{"flags", set(6, 1), "flags"},
		{"reserved column flag", set(hdrEnd-1, 0x03), "reserved flag"},
		{"unknown type tag", set(hdrEnd-2, 9), "unknown type tag"},
		{"type tag 0", set(hdrEnd-2, 0), "unknown type tag"},
		{"serverVersion 0", set(hdrEnd+8, 0), "below 1"},
		{"serverVersion 2^53", set(hdrEnd+8, 0, 0, 0, 0, 0, 0, 0x20, 0), "outside"},
		{"rowCount over byteLength", set(hdrEnd, 200), "cannot fit"},
		{"rows short of byteLength", set(hdrEnd, 1), "unconsumed"},
		{"null on non-nullable", set(hdrEnd+16, 0x01), "non-nullable"},
		{"padding bit", set(hdrEnd+16, 0x04), "padding"},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, "trailing"},
		{"missing end marker", func(b []byte) []byte { return b[:len(b)-4] }, "end marker"},
		{"truncated end marker", func(b []byte) []byte { return b[:len(b)-2] }, "truncated"},
		{"truncated header", func(b []byte) []byte { return b[:hdrEnd-3] }, "segment column name"},
		{"truncated block", func(b []byte) []byte { return b[:hdrEnd+12] }, "exceeds"},
		{"empty", func(b []byte) []byte { return nil }, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := tt.corrupt(bytes.Clone(good))
			_, err := DecodeSegment(bad)
			var de *DecodeError
			if !errors.As(err, &de) || de.Code != CodeInvalidRequest {
				t.Fatalf("DecodeSegment err = %v, want %s", err, CodeInvalidRequest)
			}
			if !strings.Contains(de.Reason, tt.reason) {
				t.Errorf("reason %q does not mention %q", de.Reason, tt.reason)
			}
			if got := ErrorCode(ValidateSegment(bad)); got != CodeInvalidRequest {
				t.Errorf("ValidateSegment code = %q", got)
			}
			if got := ErrorCode(streamSegmentErr(iotest.OneByteReader(bytes.NewReader(bad)))); got != CodeInvalidRequest {
				t.Errorf("SegmentReader code = %q", got)
			}
		})
	}
	if err := ValidateSegment(good); err != nil {
		t.Fatalf("ValidateSegment(good): %v", err)
	}
}

func TestSegmentReader(t *testing.T) {
	src := smallSegment(t, 3, 2, 1)
	bin, err := EncodeSegment(src)
	if err != nil {
		t.Fatal(err)
	}
	got := readSegmentStream(t, iotest.HalfReader(bytes.NewReader(bin)))
	if !reflect.DeepEqual(got, src) {
		t.Errorf("streamed segment differs:\n got %+v\nwant %+v", got, src)
	}
	sr, err := NewSegmentReader(bytes.NewReader(bin), 40)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sr.NextBlock(); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("block over the limit: err = %v", err)
	}
	if _, err := sr.NextBlock(); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("error is not sticky: %v", err)
	}
	if _, err := NewSegmentReader(bytes.NewReader(bin), 10); ErrorCode(err) != CodeInvalidRequest {
		t.Errorf("header over the limit: err = %v", err)
	}
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(bin[:40]), iotest.ErrReader(boom))
	if err := streamSegmentErr(r); !errors.Is(err, boom) {
		t.Errorf("transport error = %v, want %v", err, boom)
	}
}

func TestValidateSegmentAllocs(t *testing.T) {
	bin, err := EncodeSegment(smallSegment(t, 500, 500))
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := ValidateSegment(bin); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Errorf("ValidateSegment of 1000 rows: %v allocations, want ≤ 4", allocs)
	}
}

func TestRenderSegmentValues(t *testing.T) {
	cols := []Column{{Name: "f", Type: TypeFloat}, {Name: "j", Type: TypeJSON}, {Name: "b", Type: TypeBytes, Nullable: true}}
	got := RenderRowValues(cols, []Value{{Float: math.Copysign(0, -1)}, {Str: `[1, {"a" : 2}]`}, {Null: true}})
	assertRendering(t, got, []byte(`{"f":0,"j":[1,{"a":2}],"b":null}`))
	nan := RenderRowValues(cols[:1], []Value{{Float: math.NaN()}})
	assertRendering(t, nan, []byte(`{"f":null}`))
}
