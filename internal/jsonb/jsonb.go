// Package jsonb says which JSON texts Postgres's jsonb type accepts.
// pgstore projects a json column value jsonb refuses as NULL; durable
// reaction payloads, which both drivers store, must be texts jsonb holds.
package jsonb

import "math"

// Postgres's jsonb is narrower than JSON: it refuses a \u0000 escape, a
// \u escape of a lone UTF-16 surrogate, and a number outside numeric's
// range. The limits below are numeric's: at most 131,072 digits before
// the decimal point and a display scale of at most 16,383 digits after it
// (the scale counts the digits the literal writes after the point, less
// its exponent, also for a zero).
const (
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	numericMaxExponent  = math.MaxInt32 / 2
)

// Holds reports whether Postgres's jsonb accepts s, a valid JSON text.
func Holds(s string) bool {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '"':
			end, ok := jsonbString(s, i+1)
			if !ok {
				return false
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end, ok := jsonbNumber(s, i)
			if !ok {
				return false
			}
			i = end
		default:
			i++
		}
	}
	return true
}

// jsonbString checks the string whose contents start at s[i] and returns
// the index after its closing quote.
func jsonbString(s string, i int) (int, bool) {
	for i < len(s) {
		switch s[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 < len(s) && s[i+1] == 'u' {
				r, ok := hex4(s, i+2)
				if !ok {
					return i, false
				}
				switch {
				case r == 0:
					return i, false
				case r >= 0xD800 && r <= 0xDBFF:
					if i+7 >= len(s) || s[i+6] != '\\' || s[i+7] != 'u' {
						return i, false
					}
					lo, ok := hex4(s, i+8)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return i, false
					}
					i += 12
				case r >= 0xDC00 && r <= 0xDFFF:
					return i, false
				default:
					i += 6
				}
				continue
			}
			i += 2
		default:
			i++
		}
	}
	return i, false
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// jsonbNumber checks the number at s[i] and returns the index after it.
func jsonbNumber(s string, i int) (int, bool) {
	if s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[start:i]
	frac := ""
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[fs:i]
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		neg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg = s[i] == '-'
			i++
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if exp < 1<<40 {
				exp = exp*10 + int64(s[i]-'0')
			}
			i++
		}
		if neg {
			exp = -exp
		}
	}
	// numeric's input refuses an exponent of INT_MAX/2 or more in
	// magnitude before it looks at the digits, so also for a zero.
	if exp >= numericMaxExponent || exp <= -numericMaxExponent {
		return i, false
	}
	if int64(len(frac))-exp > numericMaxScale {
		return i, false
	}
	// The digits before the point: from the first nonzero digit.
	var intDigits int64
	switch {
	case trimZeros(intPart) != "":
		intDigits = int64(len(trimZeros(intPart))) + exp
	case trimZeros(frac) != "":
		lead := int64(len(frac) - len(trimZeros(frac)))
		intDigits = exp - lead
	}
	return i, intDigits <= numericMaxIntDigits
}

func trimZeros(d string) string {
	for len(d) > 0 && d[0] == '0' {
		d = d[1:]
	}
	return d
}
