package wire

import (
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
)

// RowCodec is the generated row codec of one table at one schema version
// (§2.4): the full-row codec used by COMMIT payloads, rows segments and
// conflict serverRow values, and the sparse codec of push payloads. It is
// built once per table and is safe for concurrent use.
type RowCodec struct {
	cols      []Column
	pk        int    // index of the primary-key column, -1 for a decode-only codec
	bitmapLen int    // ceil(len(cols)/8)
	nonNull   []byte // bitmap of the non-nullable columns, same layout as a null bitmap
	padMask   byte   // bits of the final bitmap byte that are padding
}

// NewRowCodec builds the codec of a table from its columns in schema-IR
// declaration order and the name of its primary-key column. It refuses an
// empty or unknown primary key, a primary key of a type that §2.4 does not
// allow (float, bytes, blob_ref, crdt), an unknown column type and duplicate
// column names.
func NewRowCodec(columns []Column, primaryKey string) (*RowCodec, error) {
	if primaryKey == "" {
		return nil, errors.New("wire: row codec needs a primary-key column")
	}
	pk := -1
	seen := make(map[string]struct{}, len(columns))
	for i, col := range columns {
		if !col.Type.Valid() {
			return nil, fmt.Errorf("wire: column %q has unknown type tag %d", col.Name, col.Type)
		}
		if _, dup := seen[col.Name]; dup {
			return nil, fmt.Errorf("wire: duplicate column name %q", col.Name)
		}
		seen[col.Name] = struct{}{}
		if col.Name == primaryKey {
			pk = i
		}
	}
	if pk < 0 {
		return nil, fmt.Errorf("wire: primary-key column %q is not in the column list", primaryKey)
	}
	switch columns[pk].Type {
	case TypeString, TypeInteger, TypeBoolean, TypeJSON:
	default:
		return nil, fmt.Errorf("wire: primary-key column %q has ineligible type %s", primaryKey, columns[pk].Type)
	}
	c := newColumnCodec(columns)
	c.pk = pk
	return c, nil
}

// newColumnCodec builds a decode-only full-row codec for a column table
// without a primary key, such as a rows-segment header. The caller has
// checked the type tags; names are not checked.
func newColumnCodec(columns []Column) *RowCodec {
	n := len(columns)
	c := &RowCodec{
		cols:      append([]Column(nil), columns...),
		pk:        -1,
		bitmapLen: (n + 7) / 8,
	}
	c.nonNull = make([]byte, c.bitmapLen)
	for i, col := range columns {
		if !col.Nullable {
			c.nonNull[i>>3] |= 1 << (i & 7)
		}
	}
	if n%8 != 0 {
		c.padMask = ^byte(0) << (n % 8)
	}
	return c
}

// Columns returns a copy of the codec's columns in declaration order.
func (c *RowCodec) Columns() []Column { return append([]Column(nil), c.cols...) }

// PrimaryKey returns the index of the primary-key column, or -1 for a
// decode-only codec built from a rows-segment column table.
func (c *RowCodec) PrimaryKey() int { return c.pk }

// DecodeRow decodes one full row (§2.4); b must hold exactly one row. The
// returned string values alias b. Every failure is a *DecodeError with
// code sync.invalid_request.
func (c *RowCodec) DecodeRow(b []byte) ([]Value, error) {
	r := reader{b: b}
	vals := make([]Value, len(c.cols))
	c.readRow(&r, vals)
	r.finish("row")
	if r.err != nil {
		return nil, r.err
	}
	return vals, nil
}

// readRow decodes one full row at the reader's position into dst, or only
// validates it when dst is nil. Failures are left in r.err.
func (c *RowCodec) readRow(r *reader, dst []Value) {
	bitmap := r.take(c.bitmapLen, "row null bitmap")
	if r.err != nil {
		return
	}
	if c.bitmapLen > 0 && bitmap[c.bitmapLen-1]&c.padMask != 0 {
		r.fail("row null bitmap has a set padding bit")
		return
	}
	for k, b := range bitmap {
		if b&c.nonNull[k] != 0 {
			i := k*8 + bits.TrailingZeros8(b&c.nonNull[k])
			r.fail("null bit set for non-nullable column %s", c.cols[i].Name)
			return
		}
	}
	var scratch Value
	for i := range c.cols {
		v := &scratch
		if dst != nil {
			v = &dst[i]
		}
		if bitmap[i>>3]&(1<<(i&7)) != 0 {
			v.Null = true
			continue
		}
		c.readValue(r, i, v)
		if r.err != nil {
			return
		}
	}
}

// frameRow walks one full row at the reader's position as readRow does
// without dst: the null bitmap (padding bits, non-nullable columns), the
// size of every non-null value, the integer range and the boolean byte,
// so the row ends where its layout says. It does not look into the bytes
// of variable-length values: a string's UTF-8, a json value's document, a
// blob_ref's syntax (the contents an encoder of this codec checked when
// it wrote them). Failures are left in r.err.
func (c *RowCodec) frameRow(r *reader) {
	bitmap := c.readBitmap(r)
	if r.err != nil {
		return
	}
	for i := range c.cols {
		if bitmap[i>>3]&(1<<(i&7)) != 0 {
			continue
		}
		col := &c.cols[i]
		switch col.Type {
		case TypeString, TypeJSON, TypeBlobRef, TypeBytes, TypeCRDT:
			r.bytes(col.Name)
		case TypeInteger:
			r.i64(col.Name)
		case TypeFloat:
			r.take(8, col.Name)
		case TypeBoolean:
			r.boolean(col.Name)
		default:
			r.fail("column %s has unknown type tag %d", col.Name, col.Type)
		}
		if r.err != nil {
			return
		}
	}
}

// readBitmap reads a row's null bitmap and refuses a set padding bit or a
// null in a non-nullable column.
func (c *RowCodec) readBitmap(r *reader) []byte {
	bitmap := r.take(c.bitmapLen, "row null bitmap")
	if r.err != nil {
		return nil
	}
	if c.bitmapLen > 0 && bitmap[c.bitmapLen-1]&c.padMask != 0 {
		r.fail("row null bitmap has a set padding bit")
		return nil
	}
	for k, b := range bitmap {
		if b&c.nonNull[k] != 0 {
			i := k*8 + bits.TrailingZeros8(b&c.nonNull[k])
			r.fail("null bit set for non-nullable column %s", c.cols[i].Name)
			return nil
		}
	}
	return bitmap
}

// DecodeStoredRow decodes one full row into dst (one Value per column,
// overwritten) as DecodeRow does, for row bytes the caller encoded with
// this codec itself (a server's stored rows): it checks the row's framing
// as SegmentWriter.WriteStoredRow does (the null bitmap, every value's
// size, the integer range and boolean bytes, the row's end), so a row of
// another layout is refused, but not the contents of strings, json values
// and blob_refs. String and bytes values alias b. Failures are
// *DecodeError values; dst is then unspecified.
func (c *RowCodec) DecodeStoredRow(dst []Value, b []byte) error {
	if len(dst) != len(c.cols) {
		return invalidf("row decoded into %d values for %d columns", len(dst), len(c.cols))
	}
	r := reader{b: b}
	bitmap := c.readBitmap(&r)
	for i := range c.cols {
		if r.err != nil {
			return r.err
		}
		v := &dst[i]
		*v = Value{}
		if bitmap[i>>3]&(1<<(i&7)) != 0 {
			v.Null = true
			continue
		}
		col := &c.cols[i]
		switch col.Type {
		case TypeString, TypeJSON, TypeBlobRef:
			if s := r.bytes(col.Name); len(s) > 0 {
				v.Str = unsafe.String(&s[0], len(s))
			}
		case TypeInteger:
			v.Int = r.i64(col.Name)
		case TypeFloat:
			v.Float = r.f64(col.Name)
		case TypeBoolean:
			v.Bool = r.boolean(col.Name)
		case TypeBytes, TypeCRDT:
			v.Bytes = r.bytes(col.Name)
		default:
			r.fail("column %s has unknown type tag %d", col.Name, col.Type)
		}
	}
	r.finish("row")
	if r.err != nil {
		return r.err
	}
	return nil
}

// readValue decodes the non-null value of column i into v, which must be
// the zero Value or a scratch value whose stale fields do not matter.
func (c *RowCodec) readValue(r *reader, i int, v *Value) {
	col := &c.cols[i]
	switch col.Type {
	case TypeString:
		v.Str = r.str(col.Name)
	case TypeInteger:
		v.Int = r.i64(col.Name)
	case TypeFloat:
		v.Float = r.f64(col.Name)
	case TypeBoolean:
		v.Bool = r.boolean(col.Name)
	case TypeJSON:
		v.Str = r.str(col.Name)
		if r.err == nil && !validJSON(v.Str) {
			r.fail("json column %s is not a JSON document", col.Name)
		}
	case TypeBlobRef:
		v.Str = r.str(col.Name)
		if r.err == nil && !ValidBlobRef(v.Str) {
			r.fail("blob_ref column %s is not a canonical BlobRef", col.Name)
		}
	case TypeBytes, TypeCRDT:
		v.Bytes = r.bytes(col.Name)
	default:
		r.fail("column %s has unknown type tag %d", col.Name, col.Type)
	}
}

// AppendRow appends the canonical full-row encoding of row (one Value per
// column, in declaration order) to dst. It refuses, with an *EncodeError, a
// row of the wrong length, a NULL in a non-nullable column, an integer
// outside ±(2^53−1), a string that is not UTF-8, a json value that is not a
// JSON document and a blob_ref value that is not a canonical BlobRef. On
// error dst is returned unchanged.
func (c *RowCodec) AppendRow(dst []byte, row []Value) ([]byte, error) {
	if len(row) != len(c.cols) {
		return dst, encodeErrorf("row has %d values for %d columns", len(row), len(c.cols))
	}
	start := len(dst)
	w := writer{b: append(dst, make([]byte, c.bitmapLen)...)}
	for i := range row {
		if row[i].Null {
			if !c.cols[i].Nullable {
				return dst[:start], encodeErrorf("column %s is not nullable", c.cols[i].Name)
			}
			w.b[start+(i>>3)] |= 1 << (i & 7)
		}
	}
	for i := range row {
		if !row[i].Null {
			c.appendValue(&w, i, &row[i])
		}
	}
	if w.err != nil {
		return dst[:start], w.err
	}
	return w.b, nil
}

// appendValue appends the non-null value v of column i.
func (c *RowCodec) appendValue(w *writer, i int, v *Value) {
	col := &c.cols[i]
	switch col.Type {
	case TypeString:
		w.str(col.Name, v.Str)
	case TypeInteger:
		w.i64(col.Name, v.Int)
	case TypeFloat:
		w.f64(v.Float)
	case TypeBoolean:
		w.boolean(v.Bool)
	case TypeJSON:
		if !validJSON(v.Str) {
			w.fail("json column %s is not a JSON document", col.Name)
		}
		w.str(col.Name, v.Str)
	case TypeBlobRef:
		if !ValidBlobRef(v.Str) {
			w.fail("blob_ref column %s is not a canonical BlobRef", col.Name)
		}
		w.str(col.Name, v.Str)
	case TypeBytes, TypeCRDT:
		w.bytes(col.Name, v.Bytes)
	default:
		w.fail("column %s has unknown type tag %d", col.Name, col.Type)
	}
}
