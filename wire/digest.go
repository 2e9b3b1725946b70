package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// CanonicalScopeJSON renders a scope map (scope variable → values) as the
// canonical JSON of §11.2: keys and each value list sorted by UTF-16 code
// units, value lists deduplicated, no whitespace, for example
// {"org":["o1"],"project":["p1","p2"]}. A nil value list renders as [].
// It is the input of [ScopeDigest] and the value of the X-Syncular-Scopes
// header (§5.5).
//
// Invalid UTF-8 is replaced by U+FFFD before sorting and deduplication, so
// the output is always valid JSON; keys that collide after the replacement
// merge their value lists.
func CanonicalScopeJSON(scopes map[string][]string) []byte {
	type entry struct {
		key    string
		values []string
	}
	entries := make([]entry, 0, len(scopes))
	size := 2
	for k, vs := range scopes {
		norm := make([]string, len(vs))
		for i, v := range vs {
			norm[i] = scopeValidUTF8(v)
			size += len(v) + 3
		}
		entries = append(entries, entry{scopeValidUTF8(k), norm})
		size += len(k) + 6
	}
	slices.SortFunc(entries, func(a, b entry) int { return CompareKeys(a.key, b.key) })
	// Merge keys made equal by the U+FFFD replacement.
	merged := entries[:0]
	for _, e := range entries {
		if n := len(merged); n > 0 && merged[n-1].key == e.key {
			merged[n-1].values = append(merged[n-1].values, e.values...)
			continue
		}
		merged = append(merged, e)
	}
	dst := make([]byte, 0, size)
	dst = append(dst, '{')
	for i, e := range merged {
		if i > 0 {
			dst = append(dst, ',')
		}
		slices.SortFunc(e.values, CompareKeys)
		dst = append(appendJSString(dst, e.key), ':')
		dst = appendCanonicalStrings(dst, slices.Compact(e.values))
	}
	return append(dst, '}')
}

// ScopeDigest returns the scope digest of §3.5: the lowercase hex SHA-256 of
// [CanonicalScopeJSON] of the effective-scope map. For {"project":["p1"]} it
// is 5a993aa4d503af6f5dc77acc12ad399ff2e9d933c393f4de6af5f6aef4fa2977.
func ScopeDigest(scopes map[string][]string) string {
	sum := sha256.Sum256(CanonicalScopeJSON(scopes))
	return hex.EncodeToString(sum[:])
}

// ParseScopesHeader parses the X-Syncular-Scopes header of a segment
// download (§5.5): a JSON object whose values are arrays of strings. Like
// the reference server it accepts any such JSON, canonical or not (a
// duplicate key keeps its last value, insignificant whitespace is allowed);
// order and duplicates inside a list do not matter to [ScopeDigest]. A
// missing header is the caller's decision (the reference host reads it as
// "{}").
//
// Header bytes that are not valid UTF-8 are read as ISO-8859-1, one
// character per byte, because that is how a WHATWG fetch client sends a
// value with characters U+0080–U+00FF and how JavaScript servers read it.
// Any other failure is a *DecodeError with Code sync.invalid_request.
func ParseScopesHeader(header string) (map[string][]string, error) {
	b := []byte(header)
	if !utf8.Valid(b) {
		b = latin1ToUTF8(b)
	}
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, invalidf("X-Syncular-Scopes must be a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, invalidf("X-Syncular-Scopes is not JSON: %v", err)
	}
	scopes := make(map[string][]string, len(raw))
	for k, v := range raw {
		var items []json.RawMessage
		if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
			return nil, invalidf("X-Syncular-Scopes value of %q must be a list of strings", k)
		}
		values := make([]string, len(items))
		for i, item := range items {
			if len(item) == 0 || item[0] != '"' || json.Unmarshal(item, &values[i]) != nil {
				return nil, invalidf("X-Syncular-Scopes value of %q must be a list of strings", k)
			}
		}
		scopes[k] = values
	}
	return scopes, nil
}

// scopeValidUTF8 returns s with each byte of invalid UTF-8 replaced by
// U+FFFD, the same replacement appendJSString makes.
func scopeValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			sb.WriteString("\uFFFD")
		} else {
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	return sb.String()
}

// latin1ToUTF8 decodes b as ISO-8859-1.
func latin1ToUTF8(b []byte) []byte {
	out := make([]byte, 0, len(b)*2)
	for _, c := range b {
		out = utf8.AppendRune(out, rune(c))
	}
	return out
}
