package wire

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/syncgo/syncgo/internal/jsnum"
)

// canonMaxDepth bounds the nesting CanonicalJSON follows, so a cyclic map or
// slice fails instead of recursing forever. It matches encoding/json's
// decoder limit.
const canonMaxDepth = 10000

// CanonicalJSON renders v as canonical JSON for digests (§11.2): UTF-8, no
// insignificant whitespace, object keys sorted by UTF-16 code units
// ([CompareKeys]), numbers in JavaScript's shortest round-trip form, and
// strings escaped exactly as JSON.stringify escapes them. Array order is
// kept: sorting and deduplicating scope value lists is the caller's job (see
// [CanonicalScopeJSON]).
//
// v may be nil, bool, string, float64, json.Number, int, int64, []any,
// []string, map[string]any or map[string][]string, nested freely. A
// json.Number is read as JSON.parse reads it, so "1.0" renders as 1. Invalid
// UTF-8 in a string renders as U+FFFD. The error is an *EncodeError for a
// non-finite float, an integer outside ±(2^53−1), a malformed json.Number,
// an unsupported type, or nesting deeper than 10000.
func CanonicalJSON(v any) ([]byte, error) {
	b, err := appendCanonical(nil, v, 0)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func appendCanonical(dst []byte, v any, depth int) ([]byte, *EncodeError) {
	if depth > canonMaxDepth {
		return dst, encodeErrorf("canonical json: nesting deeper than %d", canonMaxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return appendJSString(dst, x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, encodeErrorf("canonical json: non-finite number %v", x)
		}
		return jsnum.Append(dst, x), nil
	case json.Number:
		if !canonJSONNumber(string(x)) {
			return dst, encodeErrorf("canonical json: %q is not a JSON number", string(x))
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return dst, encodeErrorf("canonical json: number %s out of range", string(x))
		}
		return jsnum.Append(dst, f), nil
	case int:
		return appendCanonicalInt(dst, int64(x))
	case int64:
		return appendCanonicalInt(dst, x)
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err *EncodeError
			if dst, err = appendCanonical(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case []string:
		return appendCanonicalStrings(dst, x), nil
	case map[string]any:
		dst = append(dst, '{')
		for i, k := range canonSortedKeys(x) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSString(dst, k), ':')
			var err *EncodeError
			if dst, err = appendCanonical(dst, x[k], depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case map[string][]string:
		dst = append(dst, '{')
		for i, k := range canonSortedKeys(x) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSString(dst, k), ':')
			dst = appendCanonicalStrings(dst, x[k])
		}
		return append(dst, '}'), nil
	default:
		return dst, encodeErrorf("canonical json: unsupported type %T", v)
	}
}

func appendCanonicalInt(dst []byte, v int64) ([]byte, *EncodeError) {
	if v > MaxSafeInteger || v < -MaxSafeInteger {
		return dst, encodeErrorf("canonical json: integer %d outside ±(2^53−1)", v)
	}
	return strconv.AppendInt(dst, v, 10), nil
}

func appendCanonicalStrings(dst []byte, list []string) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSString(dst, s)
	}
	return append(dst, ']')
}

// canonSortedKeys returns the keys of m in UTF-16 code-unit order.
func canonSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareKeys)
	return keys
}

// canonJSONNumber reports whether s matches the JSON number grammar
// (RFC 8259 §6), which strconv.ParseFloat alone does not enforce.
func canonJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

// appendJSString appends s as a JSON string literal escaped the way
// JSON.stringify escapes it: `"` and `\` get a backslash; U+0008, U+0009,
// U+000A, U+000C and U+000D use \b, \t, \n, \f, \r; other controls below
// U+0020 use \u00xx with lowercase hex; everything else, U+007F, U+2028 and
// U+2029 included, is written as is. Each byte of invalid UTF-8 is written
// as U+FFFD.
func appendJSString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
