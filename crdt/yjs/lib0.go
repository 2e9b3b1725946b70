package yjs

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrMalformed is the error of bytes that are not a Yjs update the
// JavaScript library would accept; errors returned by this package for bad
// input wrap it.
var ErrMalformed = errors.New("yjs: malformed update")

// ErrTooLarge is the error of an input or a merged update beyond the
// Merger's MaxBytes.
var ErrTooLarge = errors.New("yjs: update too large")

// maxSafe is the largest integer a JavaScript number holds exactly
// (Number.MAX_SAFE_INTEGER). lib0 reads every varuint into a number, so
// clocks, lengths and client ids past it cannot round-trip; they are
// refused.
const maxSafe = 1<<53 - 1

// maxAnyDepth bounds the nesting of lib0 "any" values (arrays and
// objects). The JavaScript reader recurses per level and runs out of
// stack long before a deeper value; this reader refuses it instead.
const maxAnyDepth = 1000

// malformedError reports where and why decoding stopped.
type malformedError struct {
	off    int
	reason string
}

func (e *malformedError) Error() string {
	return fmt.Sprintf("yjs: malformed update at byte %d: %s", e.off, e.reason)
}

func (e *malformedError) Unwrap() error { return ErrMalformed }

// reader decodes the lib0 encoding (the byte layer of Yjs updates).
// Every declared length is checked against the bytes that remain before
// it is used, so no allocation follows a declared size.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) fail(reason string) error { return &malformedError{off: r.pos, reason: reason} }

func (r *reader) remaining() int { return len(r.b) - r.pos }

func (r *reader) byte1() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, r.fail("unexpected end")
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

// uvarint reads a lib0 varuint: little-endian groups of 7 bits, the high
// bit marking continuation. Values past maxSafe, and encodings longer than
// 8 bytes (which lib0 reads as NaN or with lost precision), are refused;
// non-minimal encodings within 8 bytes are accepted as lib0 accepts them.
func (r *reader) uvarint() (uint64, error) {
	var v uint64
	for i := 0; i < 8; i++ {
		if r.pos >= len(r.b) {
			return 0, r.fail("unexpected end in a varuint")
		}
		c := r.b[r.pos]
		r.pos++
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if v > maxSafe {
				return 0, r.fail("varuint beyond 2^53-1")
			}
			return v, nil
		}
	}
	return 0, r.fail("varuint longer than 8 bytes")
}

// skipVarint skips a lib0 varint (sign in bit 6 of the first byte).
func (r *reader) skipVarint() error {
	start := r.pos
	for {
		c, err := r.byte1()
		if err != nil {
			return err
		}
		if c < 0x80 {
			return nil
		}
		if r.pos-start >= 8 {
			return r.fail("varint longer than 8 bytes")
		}
	}
}

// take returns the next n bytes (a sub-slice of the input).
func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, r.fail("length beyond the end of the update")
	}
	s := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s, nil
}

// varBytes reads a lib0 varUint8Array: a varuint length and the bytes.
func (r *reader) varBytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// varString reads a lib0 varString: the UTF-8 bytes, which must be valid
// (lib0 decodes with a fatal TextDecoder). It returns the bytes and the
// length of the string in UTF-16 code units, the unit of Yjs clocks.
func (r *reader) varString(validate bool) ([]byte, uint64, error) {
	start := r.pos
	s, err := r.varBytes()
	if err != nil {
		return nil, 0, err
	}
	if validate && !utf8.Valid(s) {
		r.pos = start
		return nil, 0, r.fail("a string is not valid UTF-8")
	}
	return s, utf16Len(s), nil
}

// utf16Len is the length in UTF-16 code units of valid UTF-8 s: one unit a
// character, two for those encoded in four bytes (beyond U+FFFF).
func utf16Len(s []byte) uint64 {
	n := uint64(0)
	for _, c := range s {
		switch {
		case c < 0x80 || c >= 0xc0 && c < 0xf0:
			n++ // a character of one unit starts here
		case c >= 0xf0:
			n += 2
		}
	}
	return n
}

// jsonString reads a varString holding JSON text, which JSON.parse must
// accept.
func (r *reader) jsonString(validate bool) error {
	start := r.pos
	s, _, err := r.varString(validate)
	if err != nil {
		return err
	}
	if validate && !json.Valid(s) {
		r.pos = start
		return r.fail("a JSON string does not parse")
	}
	return nil
}

// lib0 "any" tags (writeAny): 127 undefined, 126 null, 125 integer
// (varint), 124 float32, 123 float64, 122 bigint64, 121 false, 120 true,
// 119 string, 118 object, 117 array, 116 Uint8Array.
const (
	anyUndefined = 127
	anyNull      = 126
	anyInteger   = 125
	anyFloat32   = 124
	anyFloat64   = 123
	anyBigInt    = 122
	anyFalse     = 121
	anyTrue      = 120
	anyString    = 119
	anyObject    = 118
	anyArray     = 117
	anyBytes     = 116
)

// skipAny skips one lib0 "any" value, checking it as readAny would.
func (r *reader) skipAny(validate bool, depth int) error {
	if depth > maxAnyDepth {
		return r.fail("value nested too deeply")
	}
	tag, err := r.byte1()
	if err != nil {
		return err
	}
	switch tag {
	case anyUndefined, anyNull, anyFalse, anyTrue:
		return nil
	case anyInteger:
		return r.skipVarint()
	case anyFloat32:
		_, err = r.take(4)
	case anyFloat64, anyBigInt:
		_, err = r.take(8)
	case anyString:
		_, _, err = r.varString(validate)
	case anyBytes:
		_, err = r.varBytes()
	case anyArray:
		var n uint64
		if n, err = r.uvarint(); err != nil {
			return err
		}
		for ; n > 0 && err == nil; n-- {
			err = r.skipAny(validate, depth+1)
		}
	case anyObject:
		var n uint64
		if n, err = r.uvarint(); err != nil {
			return err
		}
		for ; n > 0 && err == nil; n-- {
			if _, _, err = r.varString(validate); err == nil {
				err = r.skipAny(validate, depth+1)
			}
		}
	default:
		r.pos--
		return r.fail(fmt.Sprintf("unknown value tag %d", tag))
	}
	return err
}

// appendUvarint appends v as a lib0 varuint.
func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
