package schema

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/syncgo/syncgo/wire"
)

// ScopeValue is one variable of a row's stored scopes and its value.
type ScopeValue struct {
	Variable string
	Value    string
}

// StoredScopes are the scope values extracted from a row (§3.1): one value
// per declared variable, in the order the table's scope patterns first name
// each variable. In JSON it is an object in that order, byte for byte what
// the reference server stores.
type StoredScopes []ScopeValue

// Get returns the stored value of a variable.
func (s StoredScopes) Get(variable string) (string, bool) {
	for _, sv := range s {
		if sv.Variable == variable {
			return sv.Value, true
		}
	}
	return "", false
}

// Map returns the stored scopes as a map from variable to value.
func (s StoredScopes) Map() map[string]string {
	m := make(map[string]string, len(s))
	for _, sv := range s {
		m[sv.Variable] = sv.Value
	}
	return m
}

// MarshalJSON encodes the stored scopes as a JSON object in their order,
// escaping strings as JavaScript's JSON.stringify does. json.Marshal
// re-escapes <, >, &, U+2028 and U+2029 in what it returns; for the exact
// bytes call MarshalJSON or use a json.Encoder with SetEscapeHTML(false).
func (s StoredScopes) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, sv := range s {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(jsonString(sv.Variable))
		buf.WriteByte(':')
		buf.Write(jsonString(sv.Value))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON decodes a JSON object of strings, keeping its member order.
func (s *StoredScopes) UnmarshalJSON(data []byte) error {
	members, err := decodeObject("", data)
	if err != nil {
		return fmt.Errorf("stored scopes: %w", err)
	}
	out := make(StoredScopes, 0, len(members))
	for _, m := range members {
		v, err := decodeString(m.name, m.value)
		if err != nil {
			return fmt.Errorf("stored scopes: %w", err)
		}
		out = append(out, ScopeValue{Variable: m.name, Value: v})
	}
	*s = out
	return nil
}

// ErrMissingScope is wrapped by the error of a row that has no value for a
// declared scope variable.
var ErrMissingScope = errors.New("missing scope value")

// MissingScopeError reports a row whose scope column for Variable is NULL,
// empty or not renderable; a write of such a row is denied (§3.4).
type MissingScopeError struct {
	Table    string
	Variable string
}

// Error names the table and the variable.
func (e *MissingScopeError) Error() string {
	return fmt.Sprintf("table %q: missing scope value for %q", e.Table, e.Variable)
}

// Unwrap returns [ErrMissingScope].
func (e *MissingScopeError) Unwrap() error { return ErrMissingScope }

// StoredScopes extracts the stored scopes of a full row of the table, its
// values in column order. A declared variable whose column value has no
// string form ([RenderValue]) yields a *[MissingScopeError].
func (t *CompiledTable) StoredScopes(row []wire.Value) (StoredScopes, error) {
	if len(row) != len(t.columns) {
		return nil, fmt.Errorf("table %q: row has %d values for %d columns", t.name, len(row), len(t.columns))
	}
	out := make(StoredScopes, 0, len(t.variables))
	for _, sc := range t.scopes {
		if _, seen := out.Get(sc.Pattern.Variable); seen {
			continue
		}
		v, ok := RenderValue(t.columns[sc.ColumnIndex].Type, row[sc.ColumnIndex])
		if !ok {
			return nil, &MissingScopeError{Table: t.name, Variable: sc.Pattern.Variable}
		}
		out = append(out, ScopeValue{Variable: sc.Pattern.Variable, Value: v})
	}
	return out, nil
}

// RowID renders the primary-key value of a full row of the table, the
// change rowId (§2.2). It reports false when the row is short or the value
// has no string form.
func (t *CompiledTable) RowID(row []wire.Value) (string, bool) {
	if t.primaryKey >= len(row) {
		return "", false
	}
	return RenderValue(t.columns[t.primaryKey].Type, row[t.primaryKey])
}

// jsonString encodes s as a JSON string the way JavaScript's
// JSON.stringify does: only the quote, the backslash and control characters
// are escaped (the common ones by letter, others as lowercase \u00xx).
// Invalid UTF-8, which no JavaScript string holds, becomes U+FFFD.
func jsonString(s string) []byte {
	const hex = "0123456789abcdef"
	buf := make([]byte, 0, len(s)+2)
	buf = append(buf, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			buf = append(buf, '\\', byte(r))
		case r == '\b':
			buf = append(buf, '\\', 'b')
		case r == '\f':
			buf = append(buf, '\\', 'f')
		case r == '\n':
			buf = append(buf, '\\', 'n')
		case r == '\r':
			buf = append(buf, '\\', 'r')
		case r == '\t':
			buf = append(buf, '\\', 't')
		case r < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		default:
			buf = utf8.AppendRune(buf, r)
		}
	}
	return append(buf, '"')
}
