package sspclient

import (
	"encoding/json"
	"fmt"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Row is one synced row of the replica: its primary key rendered as the
// rowId, the server_version it was last delivered with, and its values in
// column order. Values are never modified in place; treat them as
// read-only.
type Row struct {
	ID      string
	Version int64
	Values  []wire.Value
}

// Map returns the row as column name → Go value (see [GoValue]).
func (r Row) Map(t *schema.CompiledTable) map[string]any {
	cols := t.Columns()
	out := make(map[string]any, len(cols))
	for i, c := range cols {
		if i < len(r.Values) {
			out[c.Name] = GoValue(c.Type, r.Values[i])
		}
	}
	return out
}

// GoValue converts a column value to a plain Go value (wire.GoValue).
func GoValue(t wire.ColumnType, v wire.Value) any { return wire.GoValue(t, v) }

// WireValue converts a Go value to a value of a column of type t. It
// accepts nil (NULL), a wire.Value as is, strings for string, json and
// blob_ref columns (a json column also takes json.RawMessage, []byte or
// any value json.Marshal accepts), Go integers for integer columns, Go
// integers and floats for float columns, bool, and []byte for bytes and
// crdt columns.
func WireValue(t wire.ColumnType, v any) (wire.Value, error) {
	switch x := v.(type) {
	case nil:
		return wire.Value{Null: true}, nil
	case wire.Value:
		return x, nil
	}
	switch t {
	case wire.TypeString, wire.TypeBlobRef:
		if s, ok := v.(string); ok {
			return wire.Value{Str: s}, nil
		}
	case wire.TypeJSON:
		switch x := v.(type) {
		case string:
			return wire.Value{Str: x}, nil
		case json.RawMessage:
			return wire.Value{Str: string(x)}, nil
		case []byte:
			return wire.Value{Str: string(x)}, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return wire.Value{}, err
		}
		return wire.Value{Str: string(b)}, nil
	case wire.TypeInteger:
		if n, ok := wire.Int64Of(v); ok {
			return wire.Value{Int: n}, nil
		}
	case wire.TypeFloat:
		switch x := v.(type) {
		case float64:
			return wire.Value{Float: x}, nil
		case float32:
			return wire.Value{Float: float64(x)}, nil
		}
		if n, ok := wire.Int64Of(v); ok {
			return wire.Value{Float: float64(n)}, nil
		}
	case wire.TypeBoolean:
		if b, ok := v.(bool); ok {
			return wire.Value{Bool: b}, nil
		}
	case wire.TypeBytes, wire.TypeCRDT:
		if b, ok := v.([]byte); ok {
			return wire.Value{Bytes: b}, nil
		}
	}
	return wire.Value{}, fmt.Errorf("a %T cannot be stored in a %s column", v, t)
}

// sparseValues converts the values of an upsert, a column-name map or a
// full []wire.Value row, to a sparse row of the table.
func sparseValues(t *schema.CompiledTable, values any) (wire.SparseRow, error) {
	cols := t.Columns()
	row := wire.SparseRow{Present: make([]bool, len(cols)), Values: make([]wire.Value, len(cols))}
	switch vs := values.(type) {
	case []wire.Value:
		if len(vs) != len(cols) {
			return row, fmt.Errorf("table %s: %d values for %d columns", t.Name(), len(vs), len(cols))
		}
		copy(row.Values, vs)
		for i := range row.Present {
			row.Present[i] = true
		}
	case map[string]any:
		for name, v := range vs {
			i, ok := t.ColumnIndex(name)
			if !ok {
				return row, fmt.Errorf("table %s has no column %q", t.Name(), name)
			}
			wv, err := WireValue(cols[i].Type, v)
			if err != nil {
				return row, fmt.Errorf("table %s column %s: %w", t.Name(), name, err)
			}
			row.Present[i], row.Values[i] = true, wv
		}
	default:
		return row, fmt.Errorf("upsert values must be map[string]any or []wire.Value, not %T", values)
	}
	return row, nil
}

// rowID renders the primary key of a sparse row.
func rowID(t *schema.CompiledTable, row wire.SparseRow) (string, error) {
	pk := t.PrimaryKey()
	if !row.Present[pk] {
		return "", fmt.Errorf("table %s: the primary key %s is missing", t.Name(), t.Columns()[pk].Name)
	}
	id, ok := schema.RenderValue(t.Columns()[pk].Type, row.Values[pk])
	if !ok {
		return "", fmt.Errorf("table %s: the primary key has no string form", t.Name())
	}
	return id, nil
}

// matchesScopes reports whether a full row of the table lies inside the
// scope map: for every key, the row's scope column renders to one of the
// key's values (the purge rule of §3.3). A key the table does not map to a
// column never matches (fail closed: nothing is purged by approximation).
func matchesScopes(t *schema.CompiledTable, vals []wire.Value, scopes wire.ScopeMap) bool {
	return scopesMatch(t, vals, nil, scopes)
}

// sparseMatches is matchesScopes for a sparse row: an absent scope column
// does not match, since the row is then not provably inside the scopes.
func sparseMatches(t *schema.CompiledTable, row wire.SparseRow, scopes wire.ScopeMap) bool {
	return scopesMatch(t, row.Values, row.Present, scopes)
}

func scopesMatch(t *schema.CompiledTable, vals []wire.Value, present []bool, scopes wire.ScopeMap) bool {
	if len(scopes) == 0 {
		return false
	}
	cols := t.Columns()
	for _, sc := range scopes {
		ci, ok := t.VariableColumn(sc.Key)
		if !ok || ci >= len(vals) || (present != nil && !present[ci]) {
			return false
		}
		v, ok := schema.RenderValue(cols[ci].Type, vals[ci])
		if !ok || !contains(sc.Values, v) {
			return false
		}
	}
	return true
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
