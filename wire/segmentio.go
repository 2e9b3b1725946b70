package wire

import (
	"errors"
	"io"
	"math"
)

// SegmentWriter streams a rows segment (§5.2) to an io.Writer, holding only
// the current block in memory. Rows written with WriteRow or WriteValues
// are grouped into blocks of at most BlockRows rows; a block is flushed once
// its row bytes reach BlockBytes, and a row that would take a non-empty
// block past BlockBytes starts the next one (a single larger row makes a
// block of its own). WriteBlock writes an explicit block. Close writes the
// last block and the end marker.
type SegmentWriter struct {
	// BlockRows is the row target of a block; DefaultBlockRows when ≤ 0.
	BlockRows int
	// BlockBytes is the byte target of a block's rows; DefaultBlockBytes
	// when ≤ 0.
	BlockBytes int

	w     io.Writer // nil: the segment is appended to buf (NewSegmentAppender)
	codec *RowCodec
	// buf holds the current block: 8 reserved bytes for rowCount and
	// byteLength at blk, then its rows. Writing to w, blk is 0 and buf
	// holds only the block; appending, buf is the whole segment so far.
	buf    writer
	blk    int
	rows   int
	err    error
	closed bool
}

// NewSegmentWriter writes the segment header to w and returns a writer for
// the segment's rows. It refuses a header that cannot be encoded.
func NewSegmentWriter(w io.Writer, h SegmentHeader) (*SegmentWriter, error) {
	hw := writer{}
	appendSegmentHeader(&hw, &h)
	if hw.err != nil {
		return nil, hw.err
	}
	if _, err := w.Write(hw.b); err != nil {
		return nil, err
	}
	sw := &SegmentWriter{w: w, codec: newColumnCodec(h.Columns)}
	sw.buf.b = make([]byte, 8, 4096)
	return sw, nil
}

// NewSegmentAppender is NewSegmentWriter building the segment in one
// slice instead of writing it to an io.Writer: the header and each block
// are appended to dst in place (no block is staged and copied), and Bytes
// returns the segment after Close. The bytes are the same as
// NewSegmentWriter's for the same calls.
func NewSegmentAppender(dst []byte, h SegmentHeader) (*SegmentWriter, error) {
	hw := writer{b: dst}
	appendSegmentHeader(&hw, &h)
	if hw.err != nil {
		return nil, hw.err
	}
	sw := &SegmentWriter{codec: newColumnCodec(h.Columns), blk: len(hw.b)}
	sw.buf.b = append(hw.b, 0, 0, 0, 0, 0, 0, 0, 0)
	return sw, nil
}

// Bytes returns the segment built by a NewSegmentAppender writer, dst's
// bytes first, once Close succeeded; nil otherwise.
func (sw *SegmentWriter) Bytes() []byte {
	if sw.w != nil || !sw.closed || sw.err != nil {
		return nil
	}
	return sw.buf.b
}

// Grow makes room for n more bytes of rows without another allocation
// (a NewSegmentAppender writer: the segment's slice; otherwise the block
// buffer).
func (sw *SegmentWriter) Grow(n int) {
	b := sw.buf.b
	if n <= cap(b)-len(b) {
		return
	}
	// One allocation and a copy of what is there (slices.Grow appends a
	// temporary slice of n zeros).
	grown := make([]byte, len(b), len(b)+n)
	copy(grown, b)
	sw.buf.b = grown
}

// WriteRow appends a row record: the row's serverVersion (≥ 1) and its
// full-row codec bytes, which are validated against the header's columns.
// An invalid record is refused with an *EncodeError and leaves the writer
// usable; a write error of the underlying writer is sticky.
func (sw *SegmentWriter) WriteRow(serverVersion int64, row []byte) error {
	if err := sw.usable(); err != nil {
		return err
	}
	chk := writer{}
	sw.codec.checkRecord(&chk, serverVersion, row)
	if chk.err != nil {
		return chk.err
	}
	return sw.appendRecord(serverVersion, row)
}

// WriteStoredRow appends a row record whose row bytes the caller encoded
// with the full-row codec of the header's columns itself (a server's
// stored rows, encoded and checked when they were written): the bytes are
// the same as WriteRow's. It checks the serverVersion and the row's
// framing (frameRow: the null bitmap, every value's size, the integer
// range and boolean bytes, the row's end), so a row of another layout (one
// a concurrent migration rewrote, with appended columns) is still refused;
// it does not validate the contents of variable-length values (UTF-8,
// JSON documents, BlobRefs), which WriteRow does. Errors as WriteRow's.
func (sw *SegmentWriter) WriteStoredRow(serverVersion int64, row []byte) error {
	if err := sw.usable(); err != nil {
		return err
	}
	chk := writer{}
	sw.codec.checkStoredRecord(&chk, serverVersion, row)
	if chk.err != nil {
		return chk.err
	}
	return sw.appendRecord(serverVersion, row)
}

// appendRecord appends a checked row record to the current block.
func (sw *SegmentWriter) appendRecord(serverVersion int64, row []byte) error {
	mark := len(sw.buf.b)
	sw.buf.i64("row serverVersion", serverVersion)
	sw.buf.b = append(sw.buf.b, row...)
	return sw.added(mark)
}

// WriteValues encodes row (one Value per header column) with the full-row
// codec straight into the current block, validating it once: the fast path
// for a server producing a segment from stored values. It refuses what
// RowCodec.AppendRow refuses and a serverVersion outside 1..2^53−1, with an
// *EncodeError that leaves the writer usable.
func (sw *SegmentWriter) WriteValues(serverVersion int64, row []Value) error {
	if err := sw.usable(); err != nil {
		return err
	}
	if serverVersion < 1 || serverVersion > MaxSafeInteger {
		return encodeErrorf("row serverVersion %d is outside 1..2^53−1", serverVersion)
	}
	mark := len(sw.buf.b)
	sw.buf.i64("row serverVersion", serverVersion)
	b, err := sw.codec.AppendRow(sw.buf.b, row)
	if err != nil {
		sw.buf.b = sw.buf.b[:mark]
		return err
	}
	sw.buf.b = b
	return sw.added(mark)
}

// added accounts for the record appended at buf[mark:]. If it takes a
// non-empty block past BlockBytes, the rows before it are flushed first;
// the block is flushed once it reaches either target.
func (sw *SegmentWriter) added(mark int) error {
	maxBytes := sw.BlockBytes
	if maxBytes <= 0 {
		maxBytes = DefaultBlockBytes
	}
	maxRows := sw.BlockRows
	if maxRows <= 0 {
		maxRows = DefaultBlockRows
	}
	if sw.rows > 0 && len(sw.buf.b)-sw.blk-8 > maxBytes {
		if err := sw.writeBlock(mark); err != nil {
			return err
		}
		if sw.w != nil {
			n := copy(sw.buf.b[8:], sw.buf.b[mark:])
			sw.buf.b = sw.buf.b[:8+n]
		} else {
			// The next block's reserved bytes go in before the record.
			end := len(sw.buf.b)
			sw.buf.b = append(sw.buf.b, 0, 0, 0, 0, 0, 0, 0, 0)
			copy(sw.buf.b[mark+8:], sw.buf.b[mark:end])
			sw.blk = mark
		}
	}
	sw.rows++
	if sw.rows >= maxRows || len(sw.buf.b)-sw.blk-8 >= maxBytes {
		return sw.flush()
	}
	return nil
}

// WriteBlock flushes any pending rows as a block of their own, then writes
// rows as exactly one block. rows must not be empty.
func (sw *SegmentWriter) WriteBlock(rows []SegmentRow) error {
	if err := sw.usable(); err != nil {
		return err
	}
	if len(rows) == 0 {
		return encodeErrorf("segment block is empty")
	}
	chk := writer{}
	for _, row := range rows {
		sw.codec.checkRecord(&chk, row.ServerVersion, row.Row)
		if chk.err != nil {
			return chk.err
		}
	}
	if err := sw.flush(); err != nil {
		return err
	}
	for _, row := range rows {
		sw.buf.i64("row serverVersion", row.ServerVersion)
		sw.buf.b = append(sw.buf.b, row.Row...)
	}
	sw.rows = len(rows)
	return sw.flush()
}

// Close writes the pending block and the end marker. It does not close the
// underlying writer. Calling Close again returns the first result.
func (sw *SegmentWriter) Close() error {
	if sw.closed {
		return sw.err
	}
	sw.closed = true
	if sw.err != nil {
		return sw.err
	}
	if err := sw.flush(); err != nil {
		return err
	}
	if sw.w == nil {
		// The end marker takes the place of the next block's header.
		sw.buf.b = append(sw.buf.b[:sw.blk], 0, 0, 0, 0)
		return nil
	}
	if _, err := sw.w.Write([]byte{0, 0, 0, 0}); err != nil {
		sw.err = err
	}
	return sw.err
}

func (sw *SegmentWriter) usable() error {
	if sw.closed {
		return errors.New("wire: segment writer is closed")
	}
	return sw.err
}

// flush writes the pending rows, if any, as one block.
func (sw *SegmentWriter) flush() error {
	if sw.rows == 0 {
		return nil
	}
	if err := sw.writeBlock(len(sw.buf.b)); err != nil {
		return err
	}
	if sw.w == nil {
		sw.blk = len(sw.buf.b)
		sw.buf.b = append(sw.buf.b, 0, 0, 0, 0, 0, 0, 0, 0)
		return nil
	}
	sw.buf.b = sw.buf.b[:8]
	return nil
}

// writeBlock completes the sw.rows records in buf[blk+8:end] as one
// block (its header at blk), writes it unless appending, and resets the
// row count.
func (sw *SegmentWriter) writeBlock(end int) error {
	n := end - sw.blk - 8
	if uint64(n) > math.MaxUint32 || uint64(sw.rows) > math.MaxUint32 {
		sw.err = encodeErrorf("segment block of %d rows and %d bytes exceeds u32", sw.rows, n)
		return sw.err
	}
	putU32(sw.buf.b[sw.blk:], uint32(sw.rows))
	putU32(sw.buf.b[sw.blk+4:], uint32(n))
	if sw.w == nil {
		sw.rows = 0
		return nil
	}
	if _, err := sw.w.Write(sw.buf.b[:end]); err != nil {
		sw.err = err
		return err
	}
	sw.rows = 0
	return nil
}
