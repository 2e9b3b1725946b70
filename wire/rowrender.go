package wire

import (
	"encoding/base64"
	"encoding/json"
	"math"
)

// RenderSegment returns the canonical JSON debug rendering of a rows
// segment (§11.1 rule 8), ready for encoding/json:
//
//	{"magic":"SSG2","formatVersion":1,"table":…,"schemaVersion":…,
//	 "columns":[{"name":…,"type":…,"nullable":…}…],
//	 "blocks":[[{"serverVersion":…,"values":{…name→value…}}…]…]}
//
// It decodes every row with the full-row codec of the header's columns and
// fails with a *DecodeError if a row is invalid.
func RenderSegment(s *Segment) (any, error) {
	c := newColumnCodec(s.Header.Columns)
	out := newJSONObject(6)
	out.add("magic", SegmentMagic)
	out.add("formatVersion", SegmentFormatVersion)
	out.add("table", s.Header.Table)
	out.add("schemaVersion", s.Header.SchemaVersion)
	out.add("columns", renderColumns(s.Header.Columns))
	blocks := make([]any, len(s.Blocks))
	for bi, block := range s.Blocks {
		rows := make([]any, len(block))
		for ri, rec := range block {
			vals, err := c.DecodeRow(rec.Row)
			if err != nil {
				return nil, err
			}
			o := newJSONObject(2)
			o.add("serverVersion", rec.ServerVersion)
			o.add("values", RenderRowValues(s.Header.Columns, vals))
			rows[ri] = o
		}
		blocks[bi] = rows
	}
	out.add("blocks", blocks)
	return out, nil
}

// RenderSparseRow returns the §11.1 rule 11 rendering of a sparse row,
// {"columns":[…],"values":{…}}, where values holds only the present
// columns and a present NULL renders as null.
func RenderSparseRow(cols []Column, r SparseRow) any {
	vals := newJSONObject(len(cols))
	for i, col := range cols {
		if i < len(r.Present) && r.Present[i] && i < len(r.Values) {
			vals.add(col.Name, renderValue(col.Type, &r.Values[i]))
		}
	}
	out := newJSONObject(2)
	out.add("columns", renderColumns(cols))
	out.add("values", vals)
	return out
}

// RenderRowValues returns the {name→value} object of one full row (§11.1
// rules 7, 8 and 10): NULL as null, bytes and crdt as standard base64,
// json and blob_ref as the embedded JSON document, non-finite floats as
// null, integers as JSON numbers.
func RenderRowValues(cols []Column, row []Value) any {
	o := newJSONObject(len(cols))
	for i, col := range cols {
		if i < len(row) {
			o.add(col.Name, renderValue(col.Type, &row[i]))
		}
	}
	return o
}

// renderColumns renders a column table as rule-8 column objects.
func renderColumns(cols []Column) []any {
	out := make([]any, len(cols))
	for i, col := range cols {
		o := newJSONObject(3)
		o.add("name", col.Name)
		o.add("type", col.Type.String())
		o.add("nullable", col.Nullable)
		out[i] = o
	}
	return out
}

// renderValue renders one column value.
func renderValue(t ColumnType, v *Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case TypeString:
		return v.Str
	case TypeInteger:
		return v.Int
	case TypeFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			return nil
		}
		if v.Float == 0 {
			return 0.0 // JSON.stringify(-0) is "0"
		}
		return v.Float
	case TypeBoolean:
		return v.Bool
	case TypeJSON, TypeBlobRef:
		return json.RawMessage(v.Str)
	case TypeBytes, TypeCRDT:
		return base64.StdEncoding.EncodeToString(v.Bytes)
	}
	return nil
}
