// Package remotewire is the byte layer of the remote operation protocol
// (REMOTE.md of syncular/syncular): the recursively tagged JSON value
// encoding of §4 and the request, response and watch messages of §§5–6
// built on it.
//
// A decoded value is one of these Go values:
//
//	null     nil
//	boolean  bool
//	number   float64 (finite)
//	string   string
//	integer  int64
//	bytes    []byte
//	array    []any
//	object   Object (ordered, unique keys)
//
// Encode accepts the same set, plus int (written as a number: it is for
// counters such as maxCommitSeq, which the protocol types as numbers).
package remotewire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a decoded value. Request bodies are
// bounded in bytes by the transport; the depth bound keeps the decoder's
// recursion (and its re-scans of nested text) small.
const MaxDepth = 32

// Field is one entry of an Object.
type Field struct {
	Key   string
	Value any
}

// Object is a decoded object value: its entries in wire order, keys
// unique.
type Object []Field

// Get returns the value of key.
func (o Object) Get(key string) (any, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// Map returns the object's entries as a map.
func (o Object) Map() map[string]any {
	m := make(map[string]any, len(o))
	for _, f := range o {
		m[f.Key] = f.Value
	}
	return m
}

// DecodeError is a malformed value.
type DecodeError struct{ msg string }

func (e *DecodeError) Error() string { return "remote value: " + e.msg }

func failf(format string, args ...any) error { return &DecodeError{msg: fmt.Sprintf(format, args...)} }

// Decode decodes one encoded value from JSON text. Any malformation (not
// JSON, an unknown tag, a payload of the wrong JSON type, a non-canonical
// integer or base64 text, a duplicate object key, nesting deeper than
// MaxDepth) is a *DecodeError.
func Decode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, failf("not UTF-8")
	}
	return decode(data, 0)
}

func decode(data []byte, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, failf("nested deeper than %d", MaxDepth)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, failf("a value must be a JSON object")
	}
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and {"T":…,"V":…} is not a tagged value.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, failf("%v", err)
	}
	var tag *string // nil: absent or null
	if rawT, ok := members["t"]; ok {
		if err := json.Unmarshal(rawT, &tag); err != nil {
			return nil, failf("%v", err)
		}
	}
	if tag == nil {
		return nil, failf("a value has no tag")
	}
	v := bytes.TrimSpace(members["v"])
	kind := byte(0)
	if len(v) > 0 {
		kind = v[0]
	}
	switch *tag {
	case "null":
		return nil, nil
	case "boolean":
		switch string(v) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, failf("boolean payload is not true or false")
	case "number":
		if kind != '-' && (kind < '0' || kind > '9') {
			return nil, failf("number payload is not a JSON number")
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, failf("number payload is not a finite number")
		}
		return f, nil
	case "string":
		s, err := jsonString(v, kind)
		return s, err
	case "integer":
		s, err := jsonString(v, kind)
		if err != nil {
			return nil, err
		}
		return parseInteger(s)
	case "bytes":
		s, err := jsonString(v, kind)
		if err != nil {
			return nil, err
		}
		return parseBase64(s)
	case "array":
		if kind != '[' {
			return nil, failf("array payload is not a JSON array")
		}
		var items []json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return nil, failf("%v", err)
		}
		out := make([]any, len(items))
		for i, it := range items {
			x, err := decode(it, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case "object":
		if kind != '[' {
			return nil, failf("object payload is not a JSON array")
		}
		var entries []json.RawMessage
		if err := json.Unmarshal(v, &entries); err != nil {
			return nil, failf("%v", err)
		}
		out := make(Object, 0, len(entries))
		seen := make(map[string]struct{}, len(entries))
		for _, e := range entries {
			var pair []json.RawMessage
			if b := bytes.TrimSpace(e); len(b) == 0 || b[0] != '[' {
				return nil, failf("an object entry is not a [key, value] pair")
			}
			if err := json.Unmarshal(e, &pair); err != nil || len(pair) != 2 {
				return nil, failf("an object entry is not a [key, value] pair")
			}
			kb := bytes.TrimSpace(pair[0])
			k, err := jsonString(kb, firstByte(kb))
			if err != nil {
				return nil, failf("an object key is not a string")
			}
			if _, dup := seen[k]; dup {
				return nil, failf("duplicate object key %q", k)
			}
			seen[k] = struct{}{}
			x, err := decode(pair[1], depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, Field{Key: k, Value: x})
		}
		return out, nil
	}
	return nil, failf("unknown tag %q", *tag)
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func jsonString(v []byte, kind byte) (string, error) {
	if kind != '"' {
		return "", failf("payload is not a JSON string")
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", failf("%v", err)
	}
	return s, nil
}

// parseInteger reads canonical decimal text in the signed 64-bit range.
func parseInteger(s string) (int64, error) {
	body := s
	if len(body) > 0 && body[0] == '-' {
		body = body[1:]
	}
	if body == "" || (body[0] == '0' && len(body) > 1) || (s[0] == '-' && body == "0") {
		return 0, failf("integer %q is not canonical decimal", s)
	}
	for i := 0; i < len(body); i++ {
		if body[i] < '0' || body[i] > '9' {
			return 0, failf("integer %q is not canonical decimal", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, failf("integer %q is outside the signed 64-bit range", s)
	}
	return n, nil
}

// parseBase64 reads canonical padded standard base64: decoding and
// re-encoding must give the same text.
func parseBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || base64.StdEncoding.EncodeToString(b) != s {
		return nil, failf("bytes payload is not canonical padded base64")
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// ErrUnsupported is the error of Encode for a Go value outside the
// encoding's set.
var ErrUnsupported = errors.New("remote value: unsupported Go value")

// Encode appends the encoding of v to dst.
func Encode(dst []byte, v any) ([]byte, error) {
	return encode(dst, v, 0)
}

func encode(dst []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, fmt.Errorf("%w: nested deeper than %d", ErrUnsupported, MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, `{"t":"null"}`...), nil
	case bool:
		dst = strconv.AppendBool(append(dst, `{"t":"boolean","v":`...), x)
		return append(dst, '}'), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return dst, fmt.Errorf("%w: non-finite number", ErrUnsupported)
		}
		dst = append(dst, `{"t":"number","v":`...)
		dst = appendNumber(dst, x)
		return append(dst, '}'), nil
	case int:
		dst = append(dst, `{"t":"number","v":`...)
		dst = strconv.AppendInt(dst, int64(x), 10)
		return append(dst, '}'), nil
	case string:
		dst = append(dst, `{"t":"string","v":`...)
		dst = appendString(dst, x)
		return append(dst, '}'), nil
	case int64:
		dst = append(dst, `{"t":"integer","v":"`...)
		dst = strconv.AppendInt(dst, x, 10)
		return append(dst, `"}`...), nil
	case []byte:
		dst = append(dst, `{"t":"bytes","v":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, `"}`...), nil
	case []any:
		dst = append(dst, `{"t":"array","v":[`...)
		for i, it := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = encode(dst, it, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, "]}"...), nil
	case Object:
		dst = append(dst, `{"t":"object","v":[`...)
		for i, f := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = appendString(dst, f.Key)
			dst = append(dst, ',')
			var err error
			if dst, err = encode(dst, f.Value, depth+1); err != nil {
				return dst, err
			}
			dst = append(dst, ']')
		}
		return append(dst, "]}"...), nil
	}
	return dst, fmt.Errorf("%w: %T", ErrUnsupported, v)
}

func appendNumber(dst []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}
