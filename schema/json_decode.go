package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// The strict JSON reading behind ParseJSON and Layout: every error names
// the path of the offending value, like "tables[1].columns[0].type".

// member is one member of a JSON object, in document order.
type member struct {
	name  string
	path  string
	value json.RawMessage
}

// errorAt returns an error about the value at path.
func errorAt(path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path == "" {
		return errors.New(msg)
	}
	return errors.New(path + ": " + msg)
}

func fieldPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func elemPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// decodeObject reads a JSON object. Duplicate members are an error, and so
// is a member not named in allowed, unless allowed is empty.
func decodeObject(path string, raw json.RawMessage, allowed ...string) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errorAt(path, "expected an object")
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errorAt(path, "malformed object: %v", err)
		}
		name, _ := tok.(string)
		if len(allowed) > 0 && !slices.Contains(allowed, name) {
			return nil, errorAt(path, "unknown field %q", name)
		}
		if slices.ContainsFunc(members, func(m member) bool { return m.name == name }) {
			return nil, errorAt(path, "duplicate field %q", name)
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, errorAt(fieldPath(path, name), "malformed value: %v", err)
		}
		members = append(members, member{name: name, path: fieldPath(path, name), value: value})
	}
	if _, err := dec.Token(); err != nil {
		return nil, errorAt(path, "malformed object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorAt(path, "unexpected data after the object")
	}
	return members, nil
}

// required returns the non-null member named name, or an error naming the
// missing field.
func required(path string, members []member, name string) (member, error) {
	m, ok := optional(members, name)
	if !ok {
		return member{}, errorAt(path, "missing field %q", name)
	}
	return m, nil
}

// optional returns the member named name unless it is absent or null.
func optional(members []member, name string) (member, bool) {
	for _, m := range members {
		if m.name == name {
			return m, !isNull(m.value)
		}
	}
	return member{}, false
}

func decodeArray(path string, raw json.RawMessage) ([]json.RawMessage, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || elems == nil {
		return nil, errorAt(path, "expected an array")
	}
	return elems, nil
}

func decodeString(path string, raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errorAt(path, "expected a string")
	}
	return s, nil
}

func decodeBool(path string, raw json.RawMessage) (bool, error) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, errorAt(path, "expected a boolean")
	}
	return b, nil
}

func decodeInt32(path string, raw json.RawMessage) (int32, error) {
	var n json.Number
	// A json.Number also takes a quoted number; the IR wants a bare one.
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) || json.Unmarshal(raw, &n) != nil {
		return 0, errorAt(path, "expected an integer")
	}
	i, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil {
		return 0, errorAt(path, "expected a 32-bit integer, got %s", n)
	}
	return int32(i), nil
}
