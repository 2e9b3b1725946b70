package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
)

// ErrNotWritten, wrapped in an error a destination returns from Write,
// tells the Encoder that the destination took none of the bytes (a gate
// that refused them), so Abort can still end the message.
var ErrNotWritten = errors.New("wire: the destination took none of the bytes")

// encoderFlushBytes is the buffered size at which an Encoder writes out.
const encoderFlushBytes = 32 << 10

// encoderBufBytes is the buffer of a message that outgrew the first
// ones: a flush's worth and room for the frame that crosses it.
const encoderBufBytes = encoderFlushBytes + encoderFlushBytes/8

// encoderFirstBytes is an Encoder's first buffer, which a push result
// (about 100 bytes) and a push+pull round's response of its own commit
// (about 400) fit; a message that outgrows it doubles it up to
// encoderSmallBytes, then gets encoderBufBytes at once.
const (
	encoderFirstBytes = 1 << 10
	encoderSmallBytes = 4 << 10
)

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
	// header is the envelope header; unflushedHeader is set until the
	// first flush writes it out.
	header          [8]byte
	unflushedHeader bool
	headerFrameEnd  int // buffer offset after the header frame while unflushed
	// sized: Grow sized the buffer for what follows, until the next
	// write-out; the buffer is not grown ahead of the frames.
	sized bool
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
	e := &Encoder{dst: dst, version: version, g: grammar{kind: kind}, unflushedHeader: true}
	copy(e.header[:4], "SSP2")
	binary.LittleEndian.PutUint16(e.header[4:6], version)
	e.header[6] = byte(kind)
	e.w.b = make([]byte, 0, encoderFirstBytes)
	e.w.b = append(e.w.b, e.header[:]...)
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
	if c := cap(e.w.b); !e.sized && c < encoderFlushBytes && len(e.w.b) > c/2 {
		// A message that outgrows the small buffers gets one that holds
		// a flush's worth at once, instead of doubling up to it: a
		// 1,000-commit window left 120 KB of outgrown buffers behind.
		n := encoderBufBytes
		if c < encoderSmallBytes {
			n = 2 * c
		}
		e.w.b = slices.Grow(e.w.b, n-len(e.w.b))
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
	if !e.g.started && e.unflushedHeader {
		e.headerFrameEnd = len(e.w.b)
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
	e.unflushedHeader, e.sized = false, false
	return nil
}

// Grow makes room for about n more bytes of frames, up to a write-out's
// worth, for a caller that knows the size of what it is about to encode
// (a window of commits): the buffer is allocated once at that size, not
// grown ahead of the frames, which gives a message that outgrows the
// first buffers one of a write-out's size (36 KiB) however little more
// it holds.
func (e *Encoder) Grow(n int) {
	if e.err != nil || e.closed {
		return
	}
	n = min(n, encoderBufBytes-len(e.w.b))
	if n > cap(e.w.b)-len(e.w.b) {
		e.w.b = slices.Grow(e.w.b, n)
	}
	e.sized = true
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
	err := e.Flush()
	if errors.Is(err, ErrNotWritten) {
		// The destination took nothing: the message may still end with
		// Abort, which discards the buffered frames and END.
		e.closed = false
	}
	return err
}

// Pending returns the message as buffered so far, envelope header first,
// while none of it was written to the destination; ok is false after the
// first write. The bytes are the encoder's: read them before the next
// Encode.
func (e *Encoder) Pending() (msg []byte, ok bool) {
	if e.err != nil || e.closed || !e.unflushedHeader {
		return nil, false
	}
	return e.w.b, true
}

// Detach ends the message without writing it, for a caller that sends
// a body of its own whose bytes it checked against this message (a
// response compressed ahead of its request): when nothing was written to
// the destination yet, it checks the grammar of the whole message as
// Close does, closes the encoder and returns the message, END included.
// Once bytes were written it returns ok false and changes nothing.
func (e *Encoder) Detach() (msg []byte, ok bool, err error) {
	if e.err != nil {
		return nil, false, e.err
	}
	if e.closed || !e.unflushedHeader {
		return nil, false, nil
	}
	if m := e.g.end(); m != "" {
		return nil, false, encodeErrorf("%s", m)
	}
	e.closed = true
	msg = append(e.w.b, byte(FrameEnd), 0, 0, 0, 0)
	e.w.b = nil
	return msg, true, nil
}

// Abort ends the message with an in-band ERROR frame: the frames buffered
// since the last flush are discarded (they never reached the destination,
// and flushes happen at frame boundaries), then ERROR and END are written.
// Use it when the response cannot go on (§1.6). A destination write error
// from before makes Abort fail too.
//
// A destination that refused a write without taking any of its bytes
// (its error wraps ErrNotWritten) does not stop Abort: the message is still
// whole up to the last successful flush, so ERROR and END can follow.
func (e *Encoder) Abort(f *ErrorFrame) error {
	if e.closed {
		return encodeErrorf("encoder is closed")
	}
	if !e.g.started {
		return encodeErrorf("an ERROR frame needs the header frame first")
	}
	if e.err != nil && !errors.Is(e.err, ErrNotWritten) {
		return e.err
	}
	e.err = nil
	if e.unflushedHeader {
		// Nothing reached the destination yet: keep the envelope and the
		// header frame.
		e.w.b = e.w.b[:e.headerFrameEnd]
	} else {
		e.w.b = e.w.b[:0]
	}
	start := len(e.w.b)
	e.w.b = append(e.w.b, byte(FrameError), 0, 0, 0, 0)
	f.appendPayload(&e.w, e.version)
	if e.w.err != nil {
		err := e.w.err
		e.w.err = nil
		return err
	}
	binary.LittleEndian.PutUint32(e.w.b[start+1:], uint32(len(e.w.b)-start-5))
	e.w.b = append(e.w.b, byte(FrameEnd), 0, 0, 0, 0)
	e.closed = true
	e.g.errSeen = true
	return e.Flush()
}
