package wire

import (
	"bytes"
	"encoding/json"
)

// jsonObject is a JSON object whose keys marshal in insertion order, for the
// §11.1 debug rendering, where field order follows the spec's field tables.
// Values are anything encoding/json marshals, including nested jsonObjects.
type jsonObject struct {
	keys []string
	vals []any
}

// newJSONObject returns an empty object with room for n keys.
func newJSONObject(n int) *jsonObject {
	return &jsonObject{keys: make([]string, 0, n), vals: make([]any, 0, n)}
}

// add appends the key k with value v. It does not check for duplicates.
func (o *jsonObject) add(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// MarshalJSON writes the object with its keys in insertion order.
func (o jsonObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
