// Package jsnum spells float64 values as JavaScript does, for the
// canonical JSON of the wire and the scope values of the schema.
package jsnum

import (
	"math"
	"strconv"
)

// Format renders f as JavaScript's Number.prototype.toString does
// (ECMA-262 Number::toString, radix 10): the shortest digits that round-trip,
// plain notation for decimal exponents in [-6, 21), exponent notation
// ("1e+21", "1.5e-7") outside it, and "0" for negative zero.
func Format(f float64) string {
	var buf [32]byte
	return string(Append(buf[:0], f))
}

// Append appends Format(f) to dst.
func Append(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits in scientific form: d[.ddd]e±x.
	var sci [32]byte
	s := strconv.AppendFloat(sci[:0], f, 'e', -1, 64)
	var digits [24]byte
	k := 0
	i := 0
	for ; s[i] != 'e'; i++ {
		if s[i] != '.' {
			digits[k] = s[i]
			k++
		}
	}
	exp, neg := 0, s[i+1] == '-'
	for _, c := range s[i+2:] { // skip 'e' and the sign AppendFloat always writes
		exp = exp*10 + int(c-'0')
	}
	if neg {
		exp = -exp
	}
	n := exp + 1 // the value is 0.d1d2…dk × 10^n
	d := digits[:k]
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
