package wire

import (
	"strings"
	"unicode/utf8"
)

// ValidBlobRef reports whether s is a canonical BlobRef JSON document
// (§5.9.1), the only value a blob_ref column may carry:
//
//	{"blobId":"sha256:<64 lowercase hex>","byteLength":<int ≥ 0>,"mediaType":"<string>","name":"<string>"}
//
// blobId and byteLength are required, mediaType and name optional. Keys
// must appear in exactly that order, without duplicates, unknown keys or
// insignificant whitespace. byteLength must be a non-negative JSON integer
// within the safe-integer contract, written in the canonical form (no sign,
// fraction, exponent or leading zero). The optional values may be any JSON
// strings. A string that passes is also a valid JSON document.
func ValidBlobRef(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	rest, ok := strings.CutPrefix(s, `{"blobId":"sha256:`)
	if !ok || len(rest) < 64 {
		return false
	}
	for i := 0; i < 64; i++ {
		if c := rest[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	if rest, ok = strings.CutPrefix(rest[64:], `","byteLength":`); !ok {
		return false
	}
	if rest, ok = cutSafeUint(rest); !ok {
		return false
	}
	if after, found := strings.CutPrefix(rest, `,"mediaType":`); found {
		if rest, ok = cutJSONString(after); !ok {
			return false
		}
	}
	if after, found := strings.CutPrefix(rest, `,"name":`); found {
		if rest, ok = cutJSONString(after); !ok {
			return false
		}
	}
	return rest == "}"
}

// cutSafeUint consumes a canonical non-negative JSON integer no larger than
// MaxSafeInteger from the front of s and returns what follows it.
func cutSafeUint(s string) (string, bool) {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 || n > 16 || (n > 1 && s[0] == '0') {
		return "", false
	}
	var v int64
	for i := 0; i < n; i++ {
		v = v*10 + int64(s[i]-'0')
	}
	if v > MaxSafeInteger {
		return "", false
	}
	return s[n:], true
}

// cutJSONString consumes one JSON string literal (RFC 8259 §7) from the
// front of s and returns what follows it.
func cutJSONString(s string) (string, bool) {
	i, ok := scanJSONString(s, 0)
	if !ok {
		return "", false
	}
	return s[i:], true
}
