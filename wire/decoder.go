package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// DefaultMaxFrameBytes is the frame-size limit of a Decoder when none is set.
const DefaultMaxFrameBytes = 16 << 20

// DecoderOptions configure a Decoder.
type DecoderOptions struct {
	// Kind, when set, is the message kind the caller expects; a message of
	// the other kind is a decode error.
	Kind MsgKind
	// MaxFrameBytes bounds a frame's payload; a longer frame is a decode
	// error wrapping ErrFrameTooLarge. Zero means DefaultMaxFrameBytes.
	MaxFrameBytes int
	// Reuse lets a Decoder reading a stream keep its buffers from frame to
	// frame: a frame's payload is read into one buffer, and COMMIT frames
	// are decoded into one Commit whose slices are reused. A frame
	// returned by Next, with every string and byte slice in it, is then
	// valid only until the next call to Next. For a reader that looks at
	// each frame once (counting a catch-up) instead of keeping it.
	Reuse bool
}

// Decoder reads an SSP2 message frame by frame, checking the envelope, each
// frame's layout and the grammar as it goes. It holds at most one frame.
type Decoder struct {
	src     source
	opts    DecoderOptions
	version uint16
	kind    MsgKind
	g       grammar
	commit  *Commit // with Reuse: the Commit every COMMIT frame is decoded into
	header  bool
	done    bool
	err     error
}

// NewDecoder returns a Decoder reading from r. Each frame's payload is read
// into a fresh buffer that the returned frame aliases.
func NewDecoder(r io.Reader, opts DecoderOptions) *Decoder {
	if _, buffered := r.(io.ByteReader); !buffered {
		r = bufio.NewReaderSize(r, 32<<10)
	}
	d := &Decoder{src: &readerSource{r: r, reuse: opts.Reuse}, opts: opts}
	if opts.Reuse {
		d.commit = &Commit{}
	}
	return d
}

// NewBytesDecoder returns a Decoder over b. Decoded frames alias b, which
// must not be modified while they are in use.
func NewBytesDecoder(b []byte, opts DecoderOptions) *Decoder {
	return &Decoder{src: &bytesSource{b: b}, opts: opts}
}

// Header reads the 8-byte envelope header if it has not been read, and
// returns the wire version and message kind.
func (d *Decoder) Header() (version uint16, kind MsgKind, err error) {
	if d.err != nil {
		return 0, 0, d.err
	}
	if !d.header {
		if err := d.readHeader(); err != nil {
			d.err = err
			return 0, 0, err
		}
	}
	return d.version, d.kind, nil
}

func (d *Decoder) readHeader() error {
	h, err := d.src.scratch(8)
	if err != nil {
		return truncation(err, "envelope header")
	}
	if string(h[:4]) != "SSP2" {
		return invalidf("bad magic %q", h[:4])
	}
	d.version = binary.LittleEndian.Uint16(h[4:6])
	if !SupportedVersion(d.version) {
		return invalidf("unsupported wire version %d", d.version)
	}
	d.kind = MsgKind(h[6])
	if d.kind != KindRequest && d.kind != KindResponse {
		return invalidf("unknown msgKind 0x%02x", h[6])
	}
	if d.opts.Kind != 0 && d.kind != d.opts.Kind {
		return invalidf("expected a %s, got a %s", d.opts.Kind, d.kind)
	}
	if h[7] != 0 {
		return invalidf("envelope flags 0x%02x must be zero", h[7])
	}
	d.g.kind = d.kind
	d.header = true
	return nil
}

// Next returns the next frame. After END it checks that nothing follows
// and returns io.EOF. Errors are sticky: a *DecodeError for bytes that are
// not a valid message, or the underlying reader's error.
func (d *Decoder) Next() (Frame, error) {
	if _, _, err := d.Header(); err != nil {
		return nil, err
	}
	if d.done {
		return nil, io.EOF
	}
	f, err := d.next()
	if err != nil {
		d.err = err
		return nil, err
	}
	if f == nil {
		d.done = true
		return nil, io.EOF
	}
	return f, nil
}

func (d *Decoder) next() (Frame, error) {
	fh, err := d.src.scratch(5)
	if err != nil {
		return nil, truncation(err, "frame header (no END frame)")
	}
	t := FrameType(fh[0])
	n := binary.LittleEndian.Uint32(fh[1:5])
	if t == FrameEnd {
		if n != 0 {
			return nil, invalidf("END frame with length %d", n)
		}
		if msg := d.g.end(); msg != "" {
			return nil, invalidf("%s", msg)
		}
		if more, err := d.src.more(); err != nil {
			return nil, err
		} else if more {
			return nil, invalidf("bytes after the END frame")
		}
		return nil, nil
	}
	limit := d.opts.MaxFrameBytes
	if limit <= 0 {
		limit = DefaultMaxFrameBytes
	}
	if uint64(n) > uint64(limit) {
		return nil, &DecodeError{Code: CodeInvalidRequest, Reason: "frame length exceeds the limit", Cause: ErrFrameTooLarge}
	}
	payload, err := d.src.read(int(n))
	if err != nil {
		return nil, truncation(err, t.Name()+" frame payload")
	}
	f, derr := decodeFrameInto(t, payload, d.version, d.kind, d.commit)
	if derr != nil {
		return nil, derr
	}
	if msg := d.g.next(f); msg != "" {
		return nil, invalidf("%s", msg)
	}
	return f, nil
}

func truncation(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidf("truncated message: %s", what)
	}
	return err
}

// decodeFrameInto decodes one frame payload of a message of the given
// kind; a COMMIT frame into commit (reusing its slices) when commit is not
// nil.
func decodeFrameInto(t FrameType, payload []byte, version uint16, kind MsgKind, commit *Commit) (Frame, *DecodeError) {
	k := kindOf(t)
	if k == 0 {
		return &Unknown{FrameType: t, Payload: payload}, nil
	}
	if k != kind {
		return nil, invalidf("%s frame is illegal in a %s", t.Name(), kind)
	}
	r := newReader(payload)
	var f Frame
	switch t {
	case FrameReqHeader:
		f = decodeReqHeader(r, version)
	case FramePushCommit:
		pc, empty := decodePushCommit(r)
		if empty != nil {
			return nil, empty
		}
		f = pc
	case FramePullHeader:
		f = decodePullHeader(r)
	case FrameSubscription:
		f = decodeSubscription(r)
	case FrameRespHeader:
		f = decodeRespHeader(r, version)
	case FrameLease:
		f = decodeLease(r)
	case FramePushResult:
		f = decodePushResult(r, version)
	case FramePushResultDetails:
		f = decodePushResultDetails(r)
	case FrameSubStart:
		f = decodeSubStart(r)
	case FrameCommit:
		if commit != nil {
			decodeCommitInto(r, commit)
			f = commit
		} else {
			f = decodeCommit(r)
		}
	case FrameSegmentRef:
		f = decodeSegmentRef(r)
	case FrameSegmentInline:
		f = decodeSegmentInline(r)
	case FrameSubEnd:
		f = decodeSubEnd(r)
	case FrameError:
		f = decodeErrorFrame(r)
	}
	r.finish(t.Name())
	if r.err != nil {
		return nil, r.err
	}
	return f, nil
}

// source yields exactly n bytes per read. read returns bytes that stay
// valid; scratch returns bytes valid until the next call.
type source interface {
	read(n int) ([]byte, error)
	scratch(n int) ([]byte, error)
	more() (bool, error)
}

type bytesSource struct {
	b   []byte
	off int
}

func (s *bytesSource) read(n int) ([]byte, error) {
	if n > len(s.b)-s.off {
		s.off = len(s.b)
		return nil, io.ErrUnexpectedEOF
	}
	p := s.b[s.off : s.off+n : s.off+n]
	s.off += n
	return p, nil
}

func (s *bytesSource) scratch(n int) ([]byte, error) { return s.read(n) }

func (s *bytesSource) more() (bool, error) { return s.off < len(s.b), nil }

type readerSource struct {
	r     io.Reader
	hdr   [8]byte
	reuse bool   // read into buf (DecoderOptions.Reuse)
	buf   []byte // the last payload's buffer
}

// readChunk is the first allocation of a frame payload read from a
// stream, and the step by which it grows: a declared length is not
// allocated before its bytes arrive.
const readChunk = 64 << 10

func (s *readerSource) read(n int) ([]byte, error) {
	if !s.reuse {
		return ReadGrowing(s.r, n)
	}
	if n <= cap(s.buf) {
		p := s.buf[:n:n]
		if _, err := io.ReadFull(s.r, p); err != nil {
			return nil, err
		}
		return p, nil
	}
	// A larger frame than any before: grown as its bytes arrive.
	p, err := ReadGrowing(s.r, n)
	if err == nil {
		s.buf = p
	}
	return p, err
}

// ReadGrowing reads exactly n bytes from r into a buffer that grows as the
// bytes arrive (at most about twice what was received), so a declared
// length that never arrives costs no more than the bytes that did. A short
// read returns io.ErrUnexpectedEOF (or io.EOF when nothing was read).
func ReadGrowing(r io.Reader, n int) ([]byte, error) {
	if n <= readChunk {
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return nil, err
		}
		return p, nil
	}
	p := make([]byte, 0, readChunk)
	for len(p) < n {
		if len(p) == cap(p) {
			grown := make([]byte, len(p), min(2*cap(p), n))
			copy(grown, p)
			p = grown
		}
		m, err := r.Read(p[len(p):min(cap(p), n)])
		p = p[:len(p)+m]
		if err != nil && len(p) < n {
			if errors.Is(err, io.EOF) {
				if len(p) == 0 {
					return nil, io.EOF
				}
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return p[:n:n], nil
}

func (s *readerSource) scratch(n int) ([]byte, error) {
	p := s.hdr[:n]
	if _, err := io.ReadFull(s.r, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *readerSource) more() (bool, error) {
	var one [1]byte
	n, err := io.ReadFull(s.r, one[:])
	if n == 1 {
		return true, nil
	}
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	return false, err
}
