package schema

import (
	"fmt"

	"github.com/syncgo/syncgo/wire"
)

// SparseRow converts column name → Go value (wire.ValueOf) to a sparse
// row of the table: the columns named are present.
func (t *CompiledTable) SparseRow(values map[string]any) (wire.SparseRow, error) {
	cols := t.Columns()
	row := wire.SparseRow{Present: make([]bool, len(cols)), Values: make([]wire.Value, len(cols))}
	for name, v := range values {
		i, ok := t.ColumnIndex(name)
		if !ok {
			return row, fmt.Errorf("table %s has no column %q", t.Name(), name)
		}
		wv, err := wire.ValueOf(cols[i].Type, v)
		if err != nil {
			return row, fmt.Errorf("table %s column %s: %w", t.Name(), name, err)
		}
		row.Present[i], row.Values[i] = true, wv
	}
	return row, nil
}

// SparseRowID renders the primary key of a sparse row of the table, its
// rowId.
func (t *CompiledTable) SparseRowID(row wire.SparseRow) (string, error) {
	pk := t.PrimaryKey()
	if pk >= len(row.Present) || !row.Present[pk] {
		return "", fmt.Errorf("table %s: the primary key %s is missing", t.Name(), t.Columns()[pk].Name)
	}
	id, ok := RenderValue(t.Columns()[pk].Type, row.Values[pk])
	if !ok {
		return "", fmt.Errorf("table %s: the primary key has no string form", t.Name())
	}
	return id, nil
}

// EncodeUpsert encodes values (SparseRow's inputs) as the sparse payload
// of an upsert of the table and returns the row's rowId (its primary key
// must be among the values).
func (t *CompiledTable) EncodeUpsert(values map[string]any) (rowID string, payload []byte, err error) {
	row, err := t.SparseRow(values)
	if err != nil {
		return "", nil, err
	}
	if rowID, err = t.SparseRowID(row); err != nil {
		return "", nil, err
	}
	if payload, err = t.RowCodec().AppendSparse(nil, row); err != nil {
		return "", nil, err
	}
	return rowID, payload, nil
}
