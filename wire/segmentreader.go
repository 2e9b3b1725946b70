package wire

import (
	"encoding/binary"
	"errors"
	"io"
)

// DefaultMaxBlockBytes is the block size limit of a SegmentReader created
// with a non-positive limit.
const DefaultMaxBlockBytes = 16 << 20

// SegmentReader reads a rows segment (§5.2) block by block from an
// io.Reader, holding only the header and the current block in memory, so a
// client never holds a whole segment (§1.4). It validates exactly what
// DecodeSegment validates.
type SegmentReader struct {
	r      io.Reader
	max    int
	header SegmentHeader
	codec  *RowCodec
	buf    []byte
	rows   []SegmentRow
	done   bool
	err    error
}

// NewSegmentReader reads and validates the segment header from r. Blocks
// whose byteLength exceeds maxBlockBytes (DefaultMaxBlockBytes when ≤ 0) are
// refused, and so is a header larger than that. Malformed bytes give a
// *DecodeError with code sync.invalid_request; errors of r other than
// io.EOF are returned as they are.
func NewSegmentReader(r io.Reader, maxBlockBytes int) (*SegmentReader, error) {
	if maxBlockBytes <= 0 {
		maxBlockBytes = DefaultMaxBlockBytes
	}
	sr := &SegmentReader{r: r, max: maxBlockBytes}
	hdr := make([]byte, 0, 256)
	var err error
	if hdr, err = sr.readHeaderBytes(hdr, 8, "segment header"); err != nil {
		return nil, err
	}
	pr := reader{b: hdr}
	if checkSegmentPrefix(&pr); pr.err != nil {
		return nil, pr.err
	}
	// table str, schemaVersion i32, column count u16
	if hdr, err = sr.readHeaderString(hdr, "segment table"); err != nil {
		return nil, err
	}
	if hdr, err = sr.readHeaderBytes(hdr, 6, "segment header"); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint16(hdr[len(hdr)-2:]))
	for range n {
		if hdr, err = sr.readHeaderString(hdr, "segment column name"); err != nil {
			return nil, err
		}
		if hdr, err = sr.readHeaderBytes(hdr, 2, "segment column record"); err != nil {
			return nil, err
		}
	}
	hr := reader{b: hdr}
	sr.header = readSegmentHeader(&hr)
	hr.finish("segment header")
	if hr.err != nil {
		return nil, hr.err
	}
	sr.codec = newColumnCodec(sr.header.Columns)
	return sr, nil
}

// readHeaderBytes appends the next n bytes of the stream to hdr.
func (sr *SegmentReader) readHeaderBytes(hdr []byte, n int, what string) ([]byte, error) {
	if len(hdr)+n > sr.max {
		return nil, invalidf("%s exceeds the %d-byte limit", what, sr.max)
	}
	start := len(hdr)
	hdr = append(hdr, make([]byte, n)...)
	if err := sr.readFull(hdr[start:], what); err != nil {
		return nil, err
	}
	return hdr, nil
}

// readHeaderString appends the next str (length and bytes) to hdr.
func (sr *SegmentReader) readHeaderString(hdr []byte, what string) ([]byte, error) {
	hdr, err := sr.readHeaderBytes(hdr, 4, what)
	if err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[len(hdr)-4:])
	if uint64(n) > uint64(sr.max) {
		return nil, invalidf("%s exceeds the %d-byte limit", what, sr.max)
	}
	return sr.readHeaderBytes(hdr, int(n), what)
}

// readFull fills b from the stream; running out of bytes is a truncation.
func (sr *SegmentReader) readFull(b []byte, what string) error {
	if _, err := io.ReadFull(sr.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return invalidf("truncated %s", what)
		}
		return err
	}
	return nil
}

// Header returns the segment header. Its strings do not alias any buffer
// the reader reuses.
func (sr *SegmentReader) Header() SegmentHeader { return sr.header }

// NextBlock reads and validates the next block and returns its row records.
// After the end marker, having checked that nothing follows it, it returns
// io.EOF. The returned rows and their bytes are valid only until the next
// call: the reader reuses its buffers. Errors are sticky.
func (sr *SegmentReader) NextBlock() ([]SegmentRow, error) {
	if sr.err != nil {
		return nil, sr.err
	}
	if sr.done {
		return nil, io.EOF
	}
	rows, err := sr.nextBlock()
	if err != nil {
		if err == io.EOF {
			sr.done = true
		} else {
			sr.err = err
		}
		return nil, err
	}
	return rows, nil
}

func (sr *SegmentReader) nextBlock() ([]SegmentRow, error) {
	var head [8]byte
	n, err := io.ReadFull(sr.r, head[:4])
	if n == 0 && errors.Is(err, io.EOF) {
		return nil, invalidf("segment ends without the end marker")
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, invalidf("truncated block rowCount")
		}
		return nil, err
	}
	count := binary.LittleEndian.Uint32(head[:4])
	if count == 0 {
		var one [1]byte
		switch _, err := io.ReadFull(sr.r, one[:]); {
		case err == nil:
			return nil, invalidf("segment has trailing bytes after the end marker")
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		default:
			return nil, err
		}
	}
	if err := sr.readFull(head[4:], "block byteLength"); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(head[4:])
	if uint64(size) > uint64(sr.max) {
		return nil, invalidf("block byteLength %d exceeds the %d-byte limit", size, sr.max)
	}
	if cap(sr.buf) < int(size) {
		sr.buf = make([]byte, size)
	}
	body := sr.buf[:size]
	if err := sr.readFull(body, "block rows"); err != nil {
		return nil, err
	}
	rows, err := sr.codec.parseBlock(body, count, sr.rows[:0], true)
	if err != nil {
		return nil, err
	}
	sr.rows = rows
	return rows, nil
}
