package wire

import (
	"encoding/binary"
	"io"
	"math"
)

// encoderFlushBytes is the buffered size at which an Encoder writes out.
const encoderFlushBytes = 32 << 10

// Encoder writes an SSP2 message frame by frame to an io.Writer, checking
// each frame's values and the grammar before it is written. It buffers at
// most about 32 KiB beyond the frame being encoded; call Flush to push
// buffered frames out early (for example after the response header).
type Encoder struct {
	dst     io.Writer
	version uint16
	g       grammar
	w       writer
	err     error
	closed  bool
}

// NewEncoder starts a message of the given kind and wire version on dst.
// Nothing is written until the first flush.
func NewEncoder(dst io.Writer, kind MsgKind, version uint16) (*Encoder, error) {
	if !SupportedVersion(version) {
		return nil, encodeErrorf("unsupported wire version %d", version)
	}
	if kind != KindRequest && kind != KindResponse {
		return nil, encodeErrorf("unknown message kind %d", kind)
	}
	e := &Encoder{dst: dst, version: version, g: grammar{kind: kind}}
	e.w.b = make([]byte, 0, 4096)
	e.w.b = append(e.w.b, 'S', 'S', 'P', '2')
	e.w.u16(version)
	e.w.u8(byte(kind))
	e.w.u8(0)
	return e, nil
}

// Version returns the wire version the encoder writes.
func (e *Encoder) Version() uint16 { return e.version }

// Encode appends one frame. A frame whose values have no canonical
// encoding, or that is out of grammar, is refused with an *EncodeError and
// nothing of it is written; the encoder stays usable.
func (e *Encoder) Encode(f Frame) error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return encodeErrorf("encoder is closed")
	}
	if u, ok := f.(*Unknown); ok && (u.FrameType == FrameEnd || kindOf(u.FrameType) != 0) {
		return encodeErrorf("frame type 0x%02x is registered and cannot be written as unknown", u.FrameType)
	}
	start := len(e.w.b)
	e.w.b = append(e.w.b, byte(f.Type()), 0, 0, 0, 0)
	f.appendPayload(&e.w, e.version)
	n := len(e.w.b) - start - 5
	if e.w.err == nil && uint64(n) > math.MaxUint32 {
		e.w.fail("%s frame of %d bytes exceeds u32", f.Type().Name(), n)
	}
	if e.w.err != nil {
		err := e.w.err
		e.w.err, e.w.b = nil, e.w.b[:start]
		return err
	}
	g := e.g
	if msg := g.next(f); msg != "" {
		e.w.b = e.w.b[:start]
		return encodeErrorf("%s", msg)
	}
	e.g = g
	binary.LittleEndian.PutUint32(e.w.b[start+1:], uint32(n))
	if len(e.w.b) >= encoderFlushBytes {
		return e.Flush()
	}
	return nil
}

// Flush writes the buffered bytes to the destination.
func (e *Encoder) Flush() error {
	if e.err != nil {
		return e.err
	}
	if len(e.w.b) == 0 {
		return nil
	}
	if _, err := e.dst.Write(e.w.b); err != nil {
		e.err = err
		return err
	}
	e.w.b = e.w.b[:0]
	return nil
}

// Close appends END, checks the grammar of the whole message and flushes.
func (e *Encoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return nil
	}
	if msg := e.g.end(); msg != "" {
		return encodeErrorf("%s", msg)
	}
	e.closed = true
	e.w.b = append(e.w.b, byte(FrameEnd), 0, 0, 0, 0)
	return e.Flush()
}
