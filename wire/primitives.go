package wire

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
	"unsafe"
)

// MaxSafeInteger is the largest magnitude an i64 field may carry (2^53−1,
// the JavaScript safe-integer contract of the Conventions).
const MaxSafeInteger = 1<<53 - 1

// reader decodes primitives from a byte slice. The first failure is sticky:
// later reads return zero values, and err holds the failure. Strings and
// byte slices alias the input, which must not be modified afterwards.
type reader struct {
	b   []byte
	off int
	err *DecodeError
}

func newReader(b []byte) *reader { return &reader{b: b} }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = invalidf(format, args...)
	}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("truncated %s: need %d bytes, have %d", what, n, len(r.b)-r.off)
		return nil
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8(what string) byte {
	s := r.take(1, what)
	if s == nil {
		return 0
	}
	return s[0]
}

func (r *reader) u16(what string) uint16 {
	s := r.take(2, what)
	if s == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(s)
}

func (r *reader) u32(what string) uint32 {
	s := r.take(4, what)
	if s == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(s)
}

func (r *reader) i32(what string) int32 { return int32(r.u32(what)) }

func (r *reader) i64(what string) int64 {
	s := r.take(8, what)
	if s == nil {
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(s))
	if v > MaxSafeInteger || v < -MaxSafeInteger {
		r.fail("%s: i64 %d outside ±(2^53−1)", what, v)
		return 0
	}
	return v
}

func (r *reader) f64(what string) float64 {
	s := r.take(8, what)
	if s == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(s))
}

func (r *reader) boolean(what string) bool {
	b := r.u8(what)
	if b > 1 {
		r.fail("%s: bool byte 0x%02x", what, b)
		return false
	}
	return b == 1
}

// present reads an opt() presence byte.
func (r *reader) present(what string) bool {
	b := r.u8(what)
	if b > 1 {
		r.fail("%s: presence byte 0x%02x", what, b)
		return false
	}
	return b == 1
}

// length reads a u32 count or byte length and checks that at least
// n*minItem bytes remain, so a hostile count never drives an allocation
// larger than the input.
func (r *reader) length(what string, minItem int) int {
	n := r.u32(what)
	if r.err != nil {
		return 0
	}
	if minItem > 0 && uint64(n)*uint64(minItem) > uint64(r.remaining()) {
		r.fail("%s: count %d exceeds the remaining %d bytes", what, n, r.remaining())
		return 0
	}
	return int(n)
}

func (r *reader) bytes(what string) []byte {
	n := r.length(what, 1)
	return r.take(n, what)
}

func (r *reader) str(what string) string {
	s := r.bytes(what)
	if len(s) == 0 {
		return ""
	}
	if !utf8.Valid(s) {
		r.fail("%s: string is not well-formed UTF-8", what)
		return ""
	}
	return unsafe.String(&s[0], len(s))
}

// jsonDoc reads a json-typed value: a str that parses as a JSON document,
// kept byte for byte.
func (r *reader) jsonDoc(what string) string {
	s := r.str(what)
	if r.err == nil && !validJSON(s) {
		r.fail("%s: not a JSON document", what)
		return ""
	}
	return s
}

func (r *reader) optStr(what string) *string {
	if !r.present(what) {
		return nil
	}
	s := r.str(what)
	return &s
}

func (r *reader) optJSON(what string) *string {
	if !r.present(what) {
		return nil
	}
	s := r.jsonDoc(what)
	return &s
}

func (r *reader) optI64(what string) *int64 {
	if !r.present(what) {
		return nil
	}
	v := r.i64(what)
	return &v
}

func (r *reader) optI32(what string) *int32 {
	if !r.present(what) {
		return nil
	}
	v := r.i32(what)
	return &v
}

func (r *reader) optBytes(what string) []byte {
	if !r.present(what) {
		return nil
	}
	b := r.bytes(what)
	if b == nil {
		b = []byte{}
	}
	return b
}

func (r *reader) strList(what string) []string {
	return strListInto(r, what, nil)
}

// strListInto is strList reusing dst's backing array when it is large
// enough.
func strListInto(r *reader, what string, dst []string) []string {
	n := r.length(what, 4)
	if n == 0 {
		if r.err != nil {
			return nil
		}
		if dst != nil {
			return dst[:0]
		}
		return []string{}
	}
	out := dst
	if out == nil || cap(out) < n {
		out = make([]string, n)
	} else {
		out = out[:n]
	}
	for i := range out {
		out[i] = r.str(what)
	}
	return out
}

// finish reports trailing bytes inside a known frame (§1.2 rule 3).
func (r *reader) finish(what string) {
	if r.err == nil && r.off != len(r.b) {
		r.fail("%s: %d trailing bytes", what, len(r.b)-r.off)
	}
}

// writer appends primitives to a byte slice. The first invalid value is
// sticky in err; the caller checks it once.
type writer struct {
	b   []byte
	err *EncodeError
}

func (w *writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = encodeErrorf(format, args...)
	}
}

func (w *writer) u8(v byte) { w.b = append(w.b, v) }

func (w *writer) u16(v uint16) { w.b = binary.LittleEndian.AppendUint16(w.b, v) }

func (w *writer) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }

func (w *writer) i32(v int32) { w.u32(uint32(v)) }

func (w *writer) i64(what string, v int64) {
	if v > MaxSafeInteger || v < -MaxSafeInteger {
		w.fail("%s: i64 %d outside ±(2^53−1)", what, v)
	}
	w.b = binary.LittleEndian.AppendUint64(w.b, uint64(v))
}

func (w *writer) f64(v float64) {
	w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(v))
}

func (w *writer) boolean(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}

func (w *writer) count(what string, n int) {
	if n < 0 || uint64(n) > math.MaxUint32 {
		w.fail("%s: length %d does not fit u32", what, n)
	}
	w.u32(uint32(n))
}

func (w *writer) bytes(what string, v []byte) {
	w.count(what, len(v))
	w.b = append(w.b, v...)
}

func (w *writer) str(what string, v string) {
	if !utf8.ValidString(v) {
		w.fail("%s: string is not well-formed UTF-8", what)
	}
	w.count(what, len(v))
	w.b = append(w.b, v...)
}

func (w *writer) jsonDoc(what string, v string) {
	if !validJSON(v) {
		w.fail("%s: not a JSON document", what)
	}
	w.str(what, v)
}

func (w *writer) optStr(what string, v *string) {
	if v == nil {
		w.u8(0)
		return
	}
	w.u8(1)
	w.str(what, *v)
}

func (w *writer) optJSON(what string, v *string) {
	if v == nil {
		w.u8(0)
		return
	}
	w.u8(1)
	w.jsonDoc(what, *v)
}

func (w *writer) optI64(what string, v *int64) {
	if v == nil {
		w.u8(0)
		return
	}
	w.u8(1)
	w.i64(what, *v)
}

func (w *writer) optI32(v *int32) {
	if v == nil {
		w.u8(0)
		return
	}
	w.u8(1)
	w.i32(*v)
}

func (w *writer) optBytes(what string, v []byte) {
	if v == nil {
		w.u8(0)
		return
	}
	w.u8(1)
	w.bytes(what, v)
}

func (w *writer) strList(what string, v []string) {
	w.count(what, len(v))
	for _, s := range v {
		w.str(what, s)
	}
}
