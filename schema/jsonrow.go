package schema

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/internal/jsnum"
	"github.com/syncgo/syncgo/wire"
)

// JSONValues decodes a JSON object of the table's columns into column →
// Go value for the columns' types (SparseRow's inputs): numbers of an
// integer column must be integers, a float column also takes "NaN",
// "Infinity" and "-Infinity", bytes and crdt columns take base64 text, a
// json column any JSON value (kept as its text), null is NULL.
// An unknown column is an error.
func (t *CompiledTable) JSONValues(line []byte) (map[string]any, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	cols := t.Columns()
	out := make(map[string]any, len(raw))
	for name, v := range raw {
		i, ok := t.ColumnIndex(name)
		if !ok {
			return nil, fmt.Errorf("table %s has no column %q", t.Name(), name)
		}
		if string(v) == "null" {
			out[name] = nil
			continue
		}
		var err error
		switch cols[i].Type {
		case wire.TypeJSON:
			out[name] = json.RawMessage(v)
		case wire.TypeInteger:
			var n json.Number
			if err = json.Unmarshal(v, &n); err == nil {
				var x int64
				if x, err = n.Int64(); err == nil {
					out[name] = x
				}
			}
		case wire.TypeFloat:
			var f float64
			if err = json.Unmarshal(v, &f); err == nil {
				out[name] = f
			} else if x, ok := nonFiniteFloat(string(v)); ok {
				out[name], err = x, nil
			}
		case wire.TypeBoolean:
			var b bool
			if err = json.Unmarshal(v, &b); err == nil {
				out[name] = b
			}
		case wire.TypeBytes, wire.TypeCRDT:
			var s string
			if err = json.Unmarshal(v, &s); err == nil {
				var b []byte
				if b, err = base64.StdEncoding.DecodeString(s); err == nil {
					out[name] = b
				}
			}
		default: // string, blob_ref
			var s string
			if err = json.Unmarshal(v, &s); err == nil {
				out[name] = s
			}
		}
		if err != nil {
			return nil, fmt.Errorf("column %s (%s): %w", name, cols[i].Type, err)
		}
	}
	return out, nil
}

// AppendJSON appends a full row of the table (its values in column
// order) as a JSON object in column order, on one line, in the form
// JSONValues reads.
func (t *CompiledTable) AppendJSON(b []byte, vals []wire.Value) ([]byte, error) {
	b = append(b, '{')
	for i, c := range t.Columns() {
		if i > 0 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(c.Name)
		b = append(append(b, name...), ':')
		v := vals[i]
		switch {
		case v.Null:
			b = append(b, "null"...)
		case c.Type == wire.TypeInteger:
			b = strconv.AppendInt(b, v.Int, 10)
		case c.Type == wire.TypeFloat && (math.IsNaN(v.Float) || math.IsInf(v.Float, 0)):
			// JSON has no number for these: the strings JSONValues reads.
			b = strconv.AppendQuote(b, jsnum.Format(v.Float))
		case c.Type == wire.TypeFloat:
			f, err := json.Marshal(v.Float)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", c.Name, err)
			}
			b = append(b, f...)
		case c.Type == wire.TypeBoolean:
			b = strconv.AppendBool(b, v.Bool)
		case c.Type == wire.TypeJSON && json.Valid([]byte(v.Str)) && !strings.ContainsAny(v.Str, "\r\n"):
			// The document as stored, byte for byte (its spacing and key
			// order are part of the value).
			b = append(b, v.Str...)
		case c.Type == wire.TypeJSON && json.Valid([]byte(v.Str)):
			// A line break can only be spacing between tokens: removed
			// to keep the row on one line.
			var compact bytes.Buffer
			_ = json.Compact(&compact, []byte(v.Str))
			b = append(b, compact.Bytes()...)
		case c.Type == wire.TypeBytes || c.Type == wire.TypeCRDT:
			s, _ := json.Marshal(base64.StdEncoding.EncodeToString(v.Bytes))
			b = append(b, s...)
		default:
			s, err := json.Marshal(v.Str)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", c.Name, err)
			}
			b = append(b, s...)
		}
	}
	return append(b, '}'), nil
}

// nonFiniteFloat reads the JSON strings that stand for the floats JSON
// has no number for, in JavaScript's spelling (jsnum.Format's).
func nonFiniteFloat(s string) (float64, bool) {
	switch s {
	case `"NaN"`:
		return math.NaN(), true
	case `"Infinity"`:
		return math.Inf(1), true
	case `"-Infinity"`:
		return math.Inf(-1), true
	}
	return 0, false
}
