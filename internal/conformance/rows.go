package conformance

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"

	"github.com/syncgo/syncgo/wire"
)

// readRowsPage is how many rows readRows reads per store call.
const readRowsPage = 1000

// rowState is one element of the readRows result.
type rowState struct {
	RowID string `json:"rowId"`
	// Version is the row's server version (§2.2).
	Version int64 `json:"version"`
	// Values holds every column by name (see renderValue).
	Values map[string]any `json:"values"`
	// Scopes are the stored scopes, variable to value (§3.1).
	Scopes map[string]string `json:"scopes"`
}

// bytesValue is how byte values cross the control surface.
type bytesValue struct {
	Bytes string `json:"$bytes"` // lowercase hex
}

// readRows returns every current row of table in the instance partition,
// ordered by row id.
func (in *instance) readRows(ctx context.Context, table string) ([]rowState, error) {
	t, ok := in.schema.Table(table)
	if !ok {
		return nil, &callError{status: http.StatusBadRequest, msg: fmt.Sprintf("unknown table %q", table)}
	}
	codec, cols := t.RowCodec(), t.WireColumns()
	out := []rowState{}
	var after *string
	for {
		rows, err := in.store.ListRows(ctx, in.partition, table, after, readRowsPage)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			vals, err := codec.DecodeRow(row.Payload)
			if err != nil {
				return nil, fmt.Errorf("row %q of %s: %w", row.RowID, table, err)
			}
			rs := rowState{RowID: row.RowID, Version: row.ServerVersion,
				Values: make(map[string]any, len(cols)), Scopes: make(map[string]string, len(row.Scopes))}
			for i, c := range cols {
				rs.Values[c.Name] = renderValue(c.Type, vals[i])
			}
			for _, sc := range row.Scopes {
				rs.Scopes[sc.Key] = sc.Value
			}
			out = append(out, rs)
		}
		if len(rows) < readRowsPage {
			return out, nil
		}
		after = &rows[len(rows)-1].RowID
	}
}

// renderValue is a column value in its natural JSON form: bytes and crdt
// values as {"$bytes": hex}, json and blob_ref columns as their raw JSON
// text (a string), a non-finite float as null (JSON has no such number).
func renderValue(t wire.ColumnType, v wire.Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case wire.TypeInteger:
		return v.Int
	case wire.TypeFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			return nil
		}
		return v.Float
	case wire.TypeBoolean:
		return v.Bool
	case wire.TypeBytes, wire.TypeCRDT:
		return bytesValue{Bytes: hex.EncodeToString(v.Bytes)}
	default: // string, json, blob_ref
		return v.Str
	}
}
