package wire

import "math"

// SegmentMagic is the first four bytes of a rows segment (§5.2).
const SegmentMagic = "SSG2"

// SegmentFormatVersion is the rows-segment formatVersion this package
// reads and writes.
const SegmentFormatVersion = 1

// Block targets of §5.2: an encoder flushes a block at this many rows or
// this many row bytes, whichever comes first.
const (
	DefaultBlockRows  = 1000
	DefaultBlockBytes = 256 << 10
)

// segmentRowMin is the smallest row record: an i64 serverVersion and an
// empty row (zero columns).
const segmentRowMin = 8

// SegmentHeader is the header of a rows segment: the table, the schema
// version its rows are encoded for and the column table (§5.2).
type SegmentHeader struct {
	Table         string
	SchemaVersion int32
	Columns       []Column
}

// SegmentRow is one row record of a rows segment: the row's server_version
// (≥ 1) and the row in full-row codec bytes (§2.4).
type SegmentRow struct {
	ServerVersion int64
	Row           []byte
}

// Segment is a decoded rows segment: its header and its row blocks in
// order. The end marker is implied.
type Segment struct {
	Header SegmentHeader
	Blocks [][]SegmentRow
}

// DecodeSegment decodes and fully validates a rows segment (§5.2): magic,
// formatVersion, flags, the column table, every block and every row under
// the full-row codec, the end marker and the absence of trailing bytes.
// Every failure is a *DecodeError with code sync.invalid_request. Strings
// and row bytes alias b.
func DecodeSegment(b []byte) (*Segment, error) {
	r := reader{b: b}
	s := &Segment{}
	s.Header = readSegmentHeader(&r)
	if r.err != nil {
		return nil, r.err
	}
	c := newColumnCodec(s.Header.Columns)
	for {
		count, body := readBlockHeader(&r)
		if r.err != nil {
			return nil, r.err
		}
		if count == 0 {
			break
		}
		rows, err := c.parseBlock(body, count, nil, true)
		if err != nil {
			return nil, err
		}
		s.Blocks = append(s.Blocks, rows)
	}
	r.finish("segment after the end marker")
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// ValidateSegment checks that b is a structurally valid rows segment, with
// exactly the checks of DecodeSegment, without building the decoded value.
// It allocates only for the column table. The envelope decoder uses it for
// SEGMENT_INLINE payloads (§5.7).
func ValidateSegment(b []byte) error {
	r := reader{b: b}
	h := readSegmentHeader(&r)
	if r.err != nil {
		return r.err
	}
	c := newColumnCodec(h.Columns)
	for {
		count, body := readBlockHeader(&r)
		if r.err != nil {
			return r.err
		}
		if count == 0 {
			break
		}
		if _, err := c.parseBlock(body, count, nil, false); err != nil {
			return err
		}
	}
	r.finish("segment after the end marker")
	if r.err != nil {
		return r.err
	}
	return nil
}

// readSegmentHeader reads the fixed prefix and the header.
func readSegmentHeader(r *reader) SegmentHeader {
	var h SegmentHeader
	checkSegmentPrefix(r)
	h.Table = r.str("segment table")
	h.SchemaVersion = r.i32("segment schemaVersion")
	n := int(r.u16("segment column count"))
	if r.err != nil {
		return h
	}
	// A column record is at least a 4-byte name length and two u8 fields.
	if n*6 > r.remaining() {
		r.fail("segment column count %d exceeds the remaining %d bytes", n, r.remaining())
		return h
	}
	h.Columns = make([]Column, n)
	for i := range h.Columns {
		col := &h.Columns[i]
		col.Name = r.str("segment column name")
		col.Type = ColumnType(r.u8("segment column type"))
		flags := r.u8("segment column flags")
		if r.err != nil {
			return h
		}
		if !col.Type.Valid() {
			r.fail("column %s has unknown type tag %d", col.Name, col.Type)
			return h
		}
		if flags&^1 != 0 {
			r.fail("column %s has reserved flag bits 0x%02x", col.Name, flags)
			return h
		}
		col.Nullable = flags&1 != 0
	}
	return h
}

// checkSegmentPrefix reads and checks the 8-byte magic, formatVersion and
// flags.
func checkSegmentPrefix(r *reader) {
	magic := r.take(4, "segment magic")
	if r.err != nil {
		return
	}
	if string(magic) != SegmentMagic {
		r.fail("segment magic is %q, not SSG2", magic)
		return
	}
	if v := r.u16("segment formatVersion"); r.err == nil && v != SegmentFormatVersion {
		r.fail("unsupported segment formatVersion %d", v)
		return
	}
	if f := r.u16("segment flags"); r.err == nil && f != 0 {
		r.fail("segment flags 0x%04x are not zero", f)
	}
}

// readBlockHeader reads a block's rowCount and, unless it is the end
// marker, its byteLength and row bytes.
func readBlockHeader(r *reader) (uint32, []byte) {
	if r.err == nil && r.remaining() == 0 {
		r.fail("segment ends without the end marker")
		return 0, nil
	}
	count := r.u32("block rowCount")
	if r.err != nil || count == 0 {
		return 0, nil
	}
	n := r.length("block byteLength", 1)
	return count, r.take(n, "block rows")
}

// parseBlock validates the count row records of one block body and, when
// keep is set, returns them appended to dst (whose capacity it reuses).
func (c *RowCodec) parseBlock(body []byte, count uint32, dst []SegmentRow, keep bool) ([]SegmentRow, error) {
	br := reader{b: body}
	if uint64(count)*uint64(segmentRowMin+c.bitmapLen) > uint64(len(body)) {
		br.fail("block rowCount %d cannot fit in %d bytes", count, len(body))
		return nil, br.err
	}
	if keep && dst == nil {
		dst = make([]SegmentRow, 0, count)
	}
	for i := uint32(0); i < count; i++ {
		sv := br.i64("row serverVersion")
		if br.err == nil && sv < 1 {
			br.fail("row serverVersion %d is below 1", sv)
		}
		start := br.off
		c.readRow(&br, nil)
		if br.err != nil {
			return nil, br.err
		}
		if keep {
			dst = append(dst, SegmentRow{ServerVersion: sv, Row: body[start:br.off:br.off]})
		}
	}
	if br.off != len(body) {
		br.fail("block rows leave %d of byteLength unconsumed", len(body)-br.off)
		return nil, br.err
	}
	return dst, nil
}

// appendSegmentHeader appends the fixed prefix and the header.
func appendSegmentHeader(w *writer, h *SegmentHeader) {
	w.b = append(w.b, SegmentMagic...)
	w.u16(SegmentFormatVersion)
	w.u16(0)
	w.str("segment table", h.Table)
	w.i32(h.SchemaVersion)
	if len(h.Columns) > math.MaxUint16 {
		w.fail("segment has %d columns, more than a u16 count", len(h.Columns))
	}
	w.u16(uint16(len(h.Columns)))
	for _, col := range h.Columns {
		if !col.Type.Valid() {
			w.fail("column %s has unknown type tag %d", col.Name, col.Type)
		}
		w.str("segment column name", col.Name)
		w.u8(byte(col.Type))
		if col.Nullable {
			w.u8(1)
		} else {
			w.u8(0)
		}
	}
}

// checkRecord refuses a row record that DecodeSegment would refuse.
func (c *RowCodec) checkRecord(w *writer, sv int64, row []byte) {
	if sv < 1 || sv > MaxSafeInteger {
		w.fail("row serverVersion %d is outside 1..2^53−1", sv)
		return
	}
	r := reader{b: row}
	c.readRow(&r, nil)
	r.finish("row")
	if r.err != nil {
		w.fail("invalid row: %s", r.err.Reason)
	}
}

// checkStoredRecord refuses a row record whose serverVersion is out of
// range or whose row does not frame as one full row of the columns
// (frameRow): the check of a row the caller encoded with this layout's
// codec itself.
func (c *RowCodec) checkStoredRecord(w *writer, sv int64, row []byte) {
	if sv < 1 || sv > MaxSafeInteger {
		w.fail("row serverVersion %d is outside 1..2^53−1", sv)
		return
	}
	r := reader{b: row}
	c.frameRow(&r)
	r.finish("row")
	if r.err != nil {
		w.fail("invalid row: %s", r.err.Reason)
	}
}

// EncodeSegment encodes s canonically, one block per element of s.Blocks,
// then the end marker. It refuses, with an *EncodeError, an empty block, a
// serverVersion below 1 and a row that is not a valid full row of the
// header's columns, so the output always passes DecodeSegment; decoding
// then re-encoding reproduces the bytes exactly.
func EncodeSegment(s *Segment) ([]byte, error) {
	w := writer{}
	appendSegmentHeader(&w, &s.Header)
	if w.err != nil {
		return nil, w.err
	}
	c := newColumnCodec(s.Header.Columns)
	for bi, block := range s.Blocks {
		if len(block) == 0 {
			return nil, encodeErrorf("segment block %d is empty", bi)
		}
		w.u32(uint32(len(block)))
		lenAt := len(w.b)
		w.u32(0)
		for _, row := range block {
			c.checkRecord(&w, row.ServerVersion, row.Row)
			w.i64("row serverVersion", row.ServerVersion)
			w.b = append(w.b, row.Row...)
		}
		if w.err != nil {
			return nil, w.err
		}
		n := len(w.b) - lenAt - 4
		if uint64(n) > math.MaxUint32 {
			return nil, encodeErrorf("segment block %d has %d bytes, more than a u32 length", bi, n)
		}
		putU32(w.b[lenAt:], uint32(n))
	}
	w.u32(0)
	return w.b, nil
}

// putU32 stores v little-endian in the first four bytes of b.
func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
