package sspclient

import (
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

// WireValue converts a Go value to a value of a column of type t
// (wire.ValueOf).
func WireValue(t wire.ColumnType, v any) (wire.Value, error) { return wire.ValueOf(t, v) }

// sparseValues converts the values of an upsert, a column-name map or a
// full []wire.Value row, to a sparse row of the table.
func sparseValues(t *schema.CompiledTable, values any) (wire.SparseRow, error) {
	switch vs := values.(type) {
	case []wire.Value:
		cols := t.Columns()
		if len(vs) != len(cols) {
			return wire.SparseRow{}, fmt.Errorf("table %s: %d values for %d columns", t.Name(), len(vs), len(cols))
		}
		row := wire.SparseRow{Present: make([]bool, len(cols)), Values: make([]wire.Value, len(cols))}
		copy(row.Values, vs)
		for i := range row.Present {
			row.Present[i] = true
		}
		return row, nil
	case map[string]any:
		return t.SparseRow(vs)
	}
	return wire.SparseRow{}, fmt.Errorf("upsert values must be map[string]any or []wire.Value, not %T", values)
}

// rowID renders the primary key of a sparse row.
func rowID(t *schema.CompiledTable, row wire.SparseRow) (string, error) { return t.SparseRowID(row) }

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
