package wire

import (
	"bytes"
	"fmt"
	"testing"
)

// benchHeader is a realistic 8-column table.
func benchHeader() SegmentHeader {
	return SegmentHeader{Table: "tasks", SchemaVersion: 4, Columns: []Column{
		{Name: "id", Type: TypeString},
		{Name: "project_id", Type: TypeString},
		{Name: "title", Type: TypeString},
		{Name: "notes", Type: TypeString, Nullable: true},
		{Name: "position", Type: TypeInteger},
		{Name: "estimate", Type: TypeFloat, Nullable: true},
		{Name: "done", Type: TypeBoolean},
		{Name: "labels", Type: TypeJSON, Nullable: true},
	}}
}

// benchRows returns n rows of the bench table as values.
func benchRows(n int) [][]Value {
	rows := make([][]Value, n)
	for i := range rows {
		row := []Value{
			{Str: fmt.Sprintf("0190f3c2-7a1b-7c3d-9e4f-%012x", i)},
			{Str: fmt.Sprintf("0190f3c2-0000-7000-8000-%012x", i%37)},
			{Str: fmt.Sprintf("Task %d: review the quarterly report draft", i)},
			{Null: true},
			{Int: int64(i) * 1024},
			{Float: float64(i%13) + 0.25},
			{Bool: i%3 == 0},
			{Str: `{"labels":["backend","p1"],"color":"#3366ff"}`},
		}
		if i%4 == 0 {
			row[3] = Value{Str: "Follow up with the design team about the new onboarding flow."}
			row[7] = Value{Null: true}
		}
		rows[i] = row
	}
	return rows
}

// encodeBenchSegment writes the rows as a segment with default blocks,
// encoding each row straight into the block with WriteValues.
func encodeBenchSegment(b *testing.B, h SegmentHeader, rows [][]Value, out *bytes.Buffer) {
	sw, err := NewSegmentWriter(out, h)
	if err != nil {
		b.Fatal(err)
	}
	for i, row := range rows {
		if err := sw.WriteValues(int64(i)+1, row); err != nil {
			b.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSegmentEncode10k(b *testing.B) {
	h := benchHeader()
	rows := benchRows(10_000)
	var out bytes.Buffer
	encodeBenchSegment(b, h, rows, &out)
	b.SetBytes(int64(out.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out.Reset()
		encodeBenchSegment(b, h, rows, &out)
	}
}

// BenchmarkSegmentEncodeRowBytes10k encodes each row with AppendRow and
// writes the bytes with WriteRow, which validates them again.
func BenchmarkSegmentEncodeRowBytes10k(b *testing.B) {
	h := benchHeader()
	c := mustCodec(b, h.Columns, "id")
	rows := benchRows(10_000)
	var out bytes.Buffer
	encodeBenchSegment(b, h, rows, &out)
	b.SetBytes(int64(out.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	var rowBuf []byte
	for b.Loop() {
		out.Reset()
		sw, err := NewSegmentWriter(&out, h)
		if err != nil {
			b.Fatal(err)
		}
		for i, row := range rows {
			if rowBuf, err = c.AppendRow(rowBuf[:0], row); err != nil {
				b.Fatal(err)
			}
			if err := sw.WriteRow(int64(i)+1, rowBuf); err != nil {
				b.Fatal(err)
			}
		}
		if err := sw.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// encodedBench returns the bench segment's bytes and its codec.
func encodedBench(b *testing.B) ([]byte, *RowCodec) {
	h := benchHeader()
	var out bytes.Buffer
	encodeBenchSegment(b, h, benchRows(10_000), &out)
	return out.Bytes(), mustCodec(b, h.Columns, "id")
}

func BenchmarkSegmentDecode10k(b *testing.B) {
	bin, _ := encodedBench(b)
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := DecodeSegment(bin); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSegmentDecodeValues10k decodes the segment and every row's
// values, as a client applying it would.
func BenchmarkSegmentDecodeValues10k(b *testing.B) {
	bin, c := encodedBench(b)
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		seg, err := DecodeSegment(bin)
		if err != nil {
			b.Fatal(err)
		}
		for _, block := range seg.Blocks {
			for _, rec := range block {
				if _, err := c.DecodeRow(rec.Row); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

func BenchmarkSegmentValidate10k(b *testing.B) {
	bin, _ := encodedBench(b)
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := ValidateSegment(bin); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSegmentReader10k(b *testing.B) {
	bin, _ := encodedBench(b)
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := streamSegmentErr(bytes.NewReader(bin)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSegmentStoredRows10k writes 10,000 rows already in the
// full-row codec (a server's stored rows) into a segment: WriteRow
// validates each again, WriteStoredRow checks its framing only.
func BenchmarkSegmentStoredRows10k(b *testing.B) {
	h := benchHeader()
	c := mustCodec(b, h.Columns, "id")
	var encoded [][]byte
	for _, row := range benchRows(10_000) {
		rb, err := c.AppendRow(nil, row)
		if err != nil {
			b.Fatal(err)
		}
		encoded = append(encoded, rb)
	}
	for _, mode := range []string{"WriteRow", "WriteStoredRow"} {
		b.Run(mode, func(b *testing.B) {
			var out bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				sw, err := NewSegmentWriter(&out, h)
				if err != nil {
					b.Fatal(err)
				}
				for i, row := range encoded {
					if mode == "WriteRow" {
						err = sw.WriteRow(int64(i)+1, row)
					} else {
						err = sw.WriteStoredRow(int64(i)+1, row)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := sw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(out.Len()))
		})
	}
}
