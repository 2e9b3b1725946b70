package store

import (
	"bytes"
	"unicode/utf8"
)

// decodeFlatSubscriptions is the fast path of DecodeSubscriptions for what
// the servers write (EncodeSubscriptions, compact; or as Postgres prints
// the JSONB, with spaces and its own member order): a list of objects with
// the members id, table, scopes and schemaVersion, strings without
// escapes, a non-negative integer version, in valid UTF-8. Anything else
// (escapes, other members, duplicates, other number forms) reports false
// and takes encoding/json, so both give the same answer
// (FuzzDecodeSubscriptions). A client record is read at every request's
// entry; reflection there was a tenth of the record's read.
func decodeFlatSubscriptions(b []byte) ([]SubscriptionRecord, bool) {
	if !utf8.Valid(b) {
		return nil, false
	}
	s := flatJSON{p: b}
	var out []SubscriptionRecord
	if !s.null() {
		var ok bool
		if out, ok = listOf(&s, s.subscription); !ok {
			return nil, false
		}
	}
	if len(skipSpace(s.p)) != 0 {
		return nil, false
	}
	return out, true
}

// flatJSON reads the JSON of decodeFlatSubscriptions; each method skips
// the whitespace before what it reads and reports whether it was there.
type flatJSON struct{ p []byte }

func (s *flatJSON) byte(c byte) bool {
	s.p = skipSpace(s.p)
	if len(s.p) > 0 && s.p[0] == c {
		s.p = s.p[1:]
		return true
	}
	return false
}

func (s *flatJSON) null() bool {
	s.p = skipSpace(s.p)
	if bytes.HasPrefix(s.p, []byte("null")) {
		s.p = s.p[4:]
		return true
	}
	return false
}

// listOf reads an array whose elements read reads (reporting whether
// each was there): never nil, as encoding/json decodes [].
func listOf[T any](s *flatJSON, read func() (T, bool)) ([]T, bool) {
	if !s.byte('[') {
		return nil, false
	}
	out := []T{}
	if s.byte(']') {
		return out, true
	}
	for {
		v, ok := read()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if !s.byte(',') {
			return out, s.byte(']')
		}
	}
}

// str reads a quoted string without escapes or control characters.
func (s *flatJSON) str() (string, bool) {
	s.p = skipSpace(s.p)
	if len(s.p) == 0 || s.p[0] != '"' {
		return "", false
	}
	for i := 1; i < len(s.p); i++ {
		switch c := s.p[i]; {
		case c == '"':
			v := string(s.p[1:i])
			s.p = s.p[i+1:]
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// version reads 0 or a positive integer without leading zeros that fits
// an int32.
func (s *flatJSON) version() (int32, bool) {
	s.p = skipSpace(s.p)
	n, i := int64(0), 0
	for ; i < len(s.p) && s.p[i] >= '0' && s.p[i] <= '9'; i++ {
		n = n*10 + int64(s.p[i]-'0')
		if n > 1<<31-1 {
			return 0, false
		}
	}
	if i == 0 || (i > 1 && s.p[0] == '0') {
		return 0, false
	}
	if i < len(s.p) && (s.p[i] == '.' || s.p[i] == 'e' || s.p[i] == 'E') {
		return 0, false
	}
	s.p = s.p[i:]
	return int32(n), true
}

// subscription reads one record's object, each member at most once.
func (s *flatJSON) subscription() (SubscriptionRecord, bool) {
	var r SubscriptionRecord
	if !s.byte('{') {
		return r, false
	}
	if s.byte('}') {
		return r, true
	}
	var seen uint8
	for {
		k, ok := s.str()
		if !ok || !s.byte(':') {
			return r, false
		}
		var bit uint8
		switch k {
		case "id":
			bit = 1
			r.ID, ok = s.str()
		case "table":
			bit = 2
			r.Table, ok = s.str()
		case "scopes":
			bit = 4
			r.Scopes, ok = s.scopes()
		case "schemaVersion":
			bit = 8
			r.SchemaVersion, ok = s.version()
		default:
			return r, false
		}
		if !ok || seen&bit != 0 {
			return r, false
		}
		seen |= bit
		if s.byte(',') {
			continue
		}
		return r, s.byte('}')
	}
}

// scopes reads a record's scopes: null, or an object of string lists (or
// null lists), each key once.
func (s *flatJSON) scopes() (map[string][]string, bool) {
	if s.null() {
		return nil, true
	}
	if !s.byte('{') {
		return nil, false
	}
	m := map[string][]string{}
	if s.byte('}') {
		return m, true
	}
	for {
		k, ok := s.str()
		if !ok || !s.byte(':') {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		var vals []string
		if !s.null() {
			if vals, ok = listOf(s, s.str); !ok {
				return nil, false
			}
		}
		m[k] = vals
		if s.byte(',') {
			continue
		}
		if s.byte('}') {
			return m, true
		}
		return nil, false
	}
}
