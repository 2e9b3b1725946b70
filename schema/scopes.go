package schema

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/internal/jsnum"
	"github.com/syncgo/syncgo/wire"
)

// Pattern is a parsed scope pattern "prefix:{variable}" (§3.1).
type Pattern struct {
	// Prefix is the literal text before ":{".
	Prefix string
	// Variable is the name between the braces.
	Variable string
}

// ParsePattern parses a scope pattern. The prefix is any non-empty text
// without braces; the variable is any non-empty text without braces or
// colons; there is exactly one variable, and it ends the pattern.
func ParsePattern(pattern string) (Pattern, error) {
	open := strings.IndexByte(pattern, '{')
	if open < 2 || pattern[open-1] != ':' || !strings.HasSuffix(pattern, "}") {
		return Pattern{}, fmt.Errorf("scope pattern %q must be 'prefix:{variable}' with exactly one variable", pattern)
	}
	prefix, variable := pattern[:open-1], pattern[open+1:len(pattern)-1]
	if variable == "" || strings.ContainsAny(prefix, "{}") || strings.ContainsAny(variable, "{}:") {
		return Pattern{}, fmt.Errorf("scope pattern %q must be 'prefix:{variable}' with exactly one variable", pattern)
	}
	return Pattern{Prefix: prefix, Variable: variable}, nil
}

// String returns the pattern in its "prefix:{variable}" form.
func (p Pattern) String() string { return p.Prefix + ":{" + p.Variable + "}" }

// Key returns the scope key of a stored value: the prefix, a colon and the
// value (§3.1).
func (p Pattern) Key(value string) string { return p.Prefix + ":" + value }

// RenderValue returns the string form of a value of a column of type t, as
// the reference server renders stored scope values and rowIds: strings,
// json and blob_ref as their text, integers in decimal, booleans as "true"
// or "false", floats as JavaScript's Number.prototype.toString does. It
// reports false for NULL, for the empty string and for bytes and crdt
// values, which have no string form.
func RenderValue(t wire.ColumnType, v wire.Value) (string, bool) {
	if v.Null {
		return "", false
	}
	var s string
	switch t {
	case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef:
		s = v.Str
	case wire.TypeInteger:
		s = strconv.FormatInt(v.Int, 10)
	case wire.TypeBoolean:
		s = strconv.FormatBool(v.Bool)
	case wire.TypeFloat:
		s = jsnum.Format(v.Float)
	default:
		return "", false
	}
	return s, s != ""
}
