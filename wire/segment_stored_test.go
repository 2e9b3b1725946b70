package wire

import (
	"bytes"
	"testing"
)

// storedTestColumns is a table with every kind of value frameRow sizes.
var storedTestColumns = []Column{
	{Name: "id", Type: TypeString},
	{Name: "n", Type: TypeInteger},
	{Name: "f", Type: TypeFloat, Nullable: true},
	{Name: "b", Type: TypeBoolean},
	{Name: "doc", Type: TypeJSON, Nullable: true},
	{Name: "ref", Type: TypeBlobRef, Nullable: true},
	{Name: "raw", Type: TypeBytes, Nullable: true},
}

func storedTestRow(t *testing.T, c *RowCodec, id string, n int64) []byte {
	t.Helper()
	b, err := c.AppendRow(nil, []Value{{Str: id}, {Int: n}, {Float: 1.5}, {Bool: true},
		{Str: `{"k":[1,2]}`}, {Null: true}, {Bytes: []byte{0, 1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriteStoredRowSameBytes: valid rows written with WriteStoredRow give
// the bytes WriteRow gives, blocks cut alike.
func TestWriteStoredRowSameBytes(t *testing.T) {
	c := mustCodec(t, storedTestColumns, "id")
	h := SegmentHeader{Table: "t", SchemaVersion: 3, Columns: storedTestColumns}
	var a, b bytes.Buffer
	wa, err := NewSegmentWriter(&a, h)
	if err != nil {
		t.Fatal(err)
	}
	wb, _ := NewSegmentWriter(&b, h)
	wa.BlockRows, wb.BlockRows = 7, 7
	wa.BlockBytes, wb.BlockBytes = 300, 300
	for i := range 50 {
		row := storedTestRow(t, c, string(rune('a'+i%26))+"-row", int64(i))
		if err := wa.WriteRow(int64(i+1), row); err != nil {
			t.Fatal(err)
		}
		if err := wb.WriteStoredRow(int64(i+1), row); err != nil {
			t.Fatal(err)
		}
	}
	if err := wa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("WriteStoredRow bytes differ from WriteRow's")
	}
	if err := ValidateSegment(b.Bytes()); err != nil {
		t.Fatalf("ValidateSegment: %v", err)
	}
}

// TestWriteStoredRowFraming: WriteStoredRow skips the contents of
// variable-length values (what the server checked when it stored them)
// but refuses, as WriteRow does, every row that does not frame as one row
// of the header's columns: a row of a layout with an appended column (a
// concurrent migration's), a truncated row, trailing bytes, a null in a
// non-nullable column, a set padding bit, an integer out of range, a bad
// boolean byte, a serverVersion out of range. Each refusal leaves the
// writer usable.
func TestWriteStoredRowFraming(t *testing.T) {
	c := mustCodec(t, storedTestColumns, "id")
	h := SegmentHeader{Table: "t", SchemaVersion: 3, Columns: storedTestColumns}
	good := storedTestRow(t, c, "row-1", 1)

	// Contents the framing does not look into.
	badUTF8 := mustAppendRaw(t, storedTestColumns, 0, "a\xffb")
	notJSON := mustAppendRaw(t, storedTestColumns, 4, "{not json")
	notRef := mustAppendRaw(t, storedTestColumns, 5, "blob:nope")
	for name, row := range map[string][]byte{"utf8": badUTF8, "json": notJSON, "blobref": notRef} {
		var a, b bytes.Buffer
		wa, _ := NewSegmentWriter(&a, h)
		wb, _ := NewSegmentWriter(&b, h)
		if err := wa.WriteRow(1, row); err == nil {
			t.Errorf("%s: WriteRow accepted a row with invalid contents", name)
		}
		if err := wb.WriteStoredRow(1, row); err != nil {
			t.Errorf("%s: WriteStoredRow refused a well-framed row: %v", name, err)
		}
	}

	// A row of the same table with a nullable column appended, as a
	// migration rewrites stored rows: refused whether the new value is
	// NULL (a padding bit of the old bitmap) or not (trailing bytes).
	wider := append(append([]Column(nil), storedTestColumns...), Column{Name: "extra", Type: TypeString, Nullable: true})
	wc := mustCodec(t, wider, "id")
	vals := []Value{{Str: "row-2"}, {Int: 2}, {Null: true}, {Bool: true}, {Null: true}, {Null: true}, {Null: true}}
	widerNull := mustAppend(t, wc, append(append([]Value(nil), vals...), Value{Null: true}))
	widerSet := mustAppend(t, wc, append(append([]Value(nil), vals...), Value{Str: "x"}))
	nine := append(append([]Column(nil), wider...), Column{Name: "more", Type: TypeInteger, Nullable: true})
	ninec := mustCodec(t, nine, "id")
	widerBitmap := mustAppend(t, ninec, append(append([]Value(nil), vals...), Value{Null: true}, Value{Int: 9}))

	nullID := append([]byte(nil), good...)
	nullID[0] |= 1 // the id column's null bit
	pad := append([]byte(nil), good...)
	pad[0] |= 0x80 // the bitmap's padding bit (7 columns)
	bigInt := mustAppendRaw(t, storedTestColumns, -1, "")
	badBool := append([]byte(nil), good...)
	// id "row-1" (4+5), n (8), f (8): the boolean byte follows.
	badBool[1+4+5+8+8] = 2

	bad := map[string][]byte{
		"appended column, NULL":      widerNull,
		"appended column, value":     widerSet,
		"two appended columns":       widerBitmap,
		"truncated":                  good[:len(good)-1],
		"trailing byte":              append(append([]byte(nil), good...), 0),
		"null in non-nullable":       nullID,
		"padding bit":                pad,
		"integer out of range":       bigInt,
		"boolean byte":               badBool,
		"empty":                      {},
		"length past the row's end":  good[:1+2],
		"string length past the end": append([]byte{0x70, 0xff, 0xff, 0, 0}, good[5:]...),
	}
	for name, row := range bad {
		var a, b bytes.Buffer
		wa, _ := NewSegmentWriter(&a, h)
		wb, _ := NewSegmentWriter(&b, h)
		errA := wa.WriteRow(1, row)
		errB := wb.WriteStoredRow(1, row)
		if errA == nil {
			t.Errorf("%s: WriteRow accepted it (the case is wrong)", name)
		}
		if errB == nil {
			t.Errorf("%s: WriteStoredRow accepted a row that does not frame", name)
			continue
		}
		if _, ok := errB.(*EncodeError); !ok {
			t.Errorf("%s: error %T, want *EncodeError", name, errB)
		}
		// The writer stays usable and writes nothing of the refused row.
		if err := wb.WriteStoredRow(1, good); err != nil {
			t.Errorf("%s: writer unusable after a refusal: %v", name, err)
		}
		if err := wb.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ValidateSegment(b.Bytes()); err != nil {
			t.Errorf("%s: segment after a refusal: %v", name, err)
		}
	}
	for _, sv := range []int64{0, -1, MaxSafeInteger + 1} {
		var b bytes.Buffer
		wb, _ := NewSegmentWriter(&b, h)
		if err := wb.WriteStoredRow(sv, good); err == nil {
			t.Errorf("serverVersion %d accepted", sv)
		}
	}
}

func mustAppend(t *testing.T, c *RowCodec, vals []Value) []byte {
	t.Helper()
	b, err := c.AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustAppendRaw encodes a row of cols by hand: NULL everywhere nullable,
// "id" for the key, 1 and false, and at column at (≥ 0) the string s
// unchecked; at -1 the integer column holds 2^53.
func mustAppendRaw(t *testing.T, cols []Column, at int, s string) []byte {
	t.Helper()
	w := writer{b: make([]byte, (len(cols)+7)/8)}
	for i, col := range cols {
		if col.Nullable && i != at {
			w.b[i>>3] |= 1 << (i & 7)
		}
	}
	for i, col := range cols {
		if col.Nullable && i != at {
			continue
		}
		switch {
		case i == at:
			w.u32(uint32(len(s)))
			w.b = append(w.b, s...)
		case col.Type == TypeString:
			w.str(col.Name, "id")
		case col.Type == TypeInteger && at == -1:
			w.b = append(w.b, 0, 0, 0, 0, 0, 0, 0x20, 0) // 2^53
		case col.Type == TypeInteger:
			w.i64(col.Name, 1)
		case col.Type == TypeBoolean:
			w.boolean(false)
		default:
			t.Fatalf("column %s: no raw value", col.Name)
		}
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	return w.b
}

// TestSegmentAppenderSameBytes: a NewSegmentAppender writer gives the bytes
// of a NewSegmentWriter for the same calls (rows that fill a block by rows
// or by bytes, a row that takes a block past BlockBytes and starts the
// next, a row larger than a block, explicit blocks, refused rows in
// between), after dst's own bytes, and nothing before Close.
func TestSegmentAppenderSameBytes(t *testing.T) {
	c := mustCodec(t, storedTestColumns, "id")
	h := SegmentHeader{Table: "t", SchemaVersion: 3, Columns: storedTestColumns}
	for _, tc := range []struct{ rows, bytes int }{{0, 0}, {7, 300}, {1000, 120}, {3, 1 << 20}, {1, 1}} {
		var stream bytes.Buffer
		ws, err := NewSegmentWriter(&stream, h)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		wa, err := NewSegmentAppender(append(make([]byte, 0, 64), prefix...), h)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []*SegmentWriter{ws, wa} {
			w.BlockRows, w.BlockBytes = tc.rows, tc.bytes
		}
		for i := range 120 {
			id := string(rune('a'+i%26)) + "-row"
			if i%17 == 5 {
				id += string(bytes.Repeat([]byte("long"), 100)) // past any small block
			}
			row := storedTestRow(t, c, id, int64(i))
			for _, w := range []*SegmentWriter{ws, wa} {
				var err error
				switch i % 4 {
				case 0:
					err = w.WriteRow(int64(i+1), row)
				case 1:
					err = w.WriteStoredRow(int64(i+1), row)
				case 2:
					err = w.WriteValues(int64(i+1), []Value{{Str: id}, {Int: int64(i)}, {Null: true}, {Bool: false}, {Null: true}, {Null: true}, {Null: true}})
				default:
					err = w.WriteBlock([]SegmentRow{{ServerVersion: int64(i + 1), Row: row}, {ServerVersion: int64(i + 2), Row: row}})
				}
				if err != nil {
					t.Fatal(err)
				}
				// Refused rows in between leave nothing behind.
				if w.WriteStoredRow(1, row[:len(row)-1]) == nil || w.WriteValues(0, nil) == nil {
					t.Fatal("a bad row was accepted")
				}
			}
			if wa.Bytes() != nil {
				t.Fatal("Bytes before Close")
			}
		}
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
		if err := wa.Close(); err != nil {
			t.Fatal(err)
		}
		got := wa.Bytes()
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], stream.Bytes()) {
			t.Fatalf("blocks of %d rows / %d bytes: appender bytes differ from the writer's", tc.rows, tc.bytes)
		}
		if err := ValidateSegment(got[len(prefix):]); err != nil {
			t.Fatalf("ValidateSegment: %v", err)
		}
		if err := wa.Close(); err != nil || !bytes.Equal(wa.Bytes(), got) {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// TestDecodeStoredRow: DecodeStoredRow gives DecodeRow's values for valid
// rows (into a reused dst), accepts contents DecodeRow refuses, and
// refuses every row that does not frame as a row of the columns.
func TestDecodeStoredRow(t *testing.T) {
	c := mustCodec(t, storedTestColumns, "id")
	dst := make([]Value, len(storedTestColumns))
	for i, row := range [][]byte{
		storedTestRow(t, c, "row-1", 1),
		mustAppend(t, c, []Value{{Str: ""}, {Int: -MaxSafeInteger}, {Null: true}, {Bool: false}, {Null: true}, {Null: true}, {Bytes: []byte{}}}),
		mustAppend(t, c, []Value{{Str: "x"}, {Int: 0}, {Float: -0.5}, {Bool: true}, {Str: "null"}, {Null: true}, {Null: true}}),
	} {
		want, err := c.DecodeRow(row)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if err := c.DecodeStoredRow(dst, row); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		for k := range want {
			w, g := want[k], dst[k]
			if w.Null != g.Null || w.Str != g.Str || w.Int != g.Int || w.Float != g.Float || w.Bool != g.Bool || !bytes.Equal(w.Bytes, g.Bytes) || (w.Bytes == nil) != (g.Bytes == nil) {
				t.Fatalf("row %d column %d: %+v, DecodeRow gives %+v", i, k, g, w)
			}
		}
	}
	if err := c.DecodeStoredRow(dst, mustAppendRaw(t, storedTestColumns, 4, "{not json")); err != nil {
		t.Fatalf("contents re-validated: %v", err)
	}
	if dst[4].Str != "{not json" || !dst[2].Null {
		t.Fatalf("values %+v", dst)
	}
	good := storedTestRow(t, c, "row-1", 1)
	wider := append(append([]Column(nil), storedTestColumns...), Column{Name: "extra", Type: TypeString, Nullable: true})
	wc := mustCodec(t, wider, "id")
	widerRow := mustAppend(t, wc, []Value{{Str: "a"}, {Int: 1}, {Null: true}, {Bool: true}, {Null: true}, {Null: true}, {Null: true}, {Str: "x"}})
	for name, row := range map[string][]byte{
		"wider layout":   widerRow,
		"truncated":      good[:len(good)-1],
		"trailing byte":  append(append([]byte(nil), good...), 0),
		"integer":        mustAppendRaw(t, storedTestColumns, -1, ""),
		"empty":          {},
		"bitmap padding": append([]byte{good[0] | 0x80}, good[1:]...),
	} {
		err := c.DecodeStoredRow(dst, row)
		if _, ok := err.(*DecodeError); !ok {
			t.Errorf("%s: error %v, want a *DecodeError", name, err)
		}
	}
	if err := c.DecodeStoredRow(dst[:3], good); err == nil {
		t.Error("a dst of the wrong length was accepted")
	}
}

// TestSegmentAppenderGrow: Grow makes room without changing the bytes,
// and the rows after it are appended without another allocation.
func TestSegmentAppenderGrow(t *testing.T) {
	c := mustCodec(t, storedTestColumns, "id")
	h := SegmentHeader{Table: "t", SchemaVersion: 3, Columns: storedTestColumns}
	row := storedTestRow(t, c, "row-1", 1)
	var want bytes.Buffer
	ws, _ := NewSegmentWriter(&want, h)
	w, err := NewSegmentAppender(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range []*SegmentWriter{ws, w} {
		if err := sw.WriteStoredRow(1, row); err != nil {
			t.Fatal(err)
		}
	}
	w.Grow(100 * (len(row) + 8))
	// AllocsPerRun calls the function twice (a warm-up): 98 rows.
	sv := int64(1)
	allocs := testing.AllocsPerRun(1, func() {
		for range 49 {
			sv++
			if err := w.WriteStoredRow(sv, row); err != nil {
				t.Fatal(err)
			}
		}
	})
	for i := range 98 {
		if err := ws.WriteStoredRow(int64(i+2), row); err != nil {
			t.Fatal(err)
		}
	}
	if allocs != 0 {
		t.Errorf("%v allocations after Grow", allocs)
	}
	ws.Close()
	w.Close()
	if !bytes.Equal(w.Bytes(), want.Bytes()) {
		t.Fatal("bytes differ after Grow")
	}
}
