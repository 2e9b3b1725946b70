package wire

import (
	"encoding/json"
	"fmt"
	"math"
)

// ColumnType is a column type tag of the schema IR (§2.4). The tag is what
// travels in a rows-segment column table.
type ColumnType uint8

// The column type tags of §2.4.
const (
	TypeString  ColumnType = 1 // str
	TypeInteger ColumnType = 2 // i64
	TypeFloat   ColumnType = 3 // f64
	TypeBoolean ColumnType = 4 // bool
	TypeJSON    ColumnType = 5 // str holding a JSON document
	TypeBytes   ColumnType = 6 // bytes
	TypeBlobRef ColumnType = 7 // str holding a canonical BlobRef JSON document
	TypeCRDT    ColumnType = 8 // bytes, opaque to the codec
)

// Valid reports whether t is one of the tags of §2.4.
func (t ColumnType) Valid() bool { return t >= TypeString && t <= TypeCRDT }

// String returns the IR name of the type ("string", "integer", ...).
func (t ColumnType) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeInteger:
		return "integer"
	case TypeFloat:
		return "float"
	case TypeBoolean:
		return "boolean"
	case TypeJSON:
		return "json"
	case TypeBytes:
		return "bytes"
	case TypeBlobRef:
		return "blob_ref"
	case TypeCRDT:
		return "crdt"
	}
	return "unknown"
}

// ParseColumnType returns the type named by an IR type name.
func ParseColumnType(name string) (ColumnType, bool) {
	for t := TypeString; t <= TypeCRDT; t++ {
		if t.String() == name {
			return t, true
		}
	}
	return 0, false
}

// Column is one column of a table as the row codec sees it: its name, type
// and nullability, in schema-IR declaration order.
type Column struct {
	Name     string
	Type     ColumnType
	Nullable bool
}

// Value is one column value of a row. Which field holds the value depends
// on the column's type: Int for integer, Float for float, Bool for boolean,
// Str for string, json and blob_ref (the raw JSON text, kept byte for
// byte), Bytes for bytes and crdt. Null marks SQL NULL.
type Value struct {
	Null  bool
	Bool  bool
	Int   int64
	Float float64
	Str   string
	Bytes []byte
}

// GoValue is v, a value of a column of type t, as a plain Go value: nil
// for NULL; int64, float64 and bool for those types; []byte (never nil)
// for bytes and crdt; string for string, json and blob_ref (their text).
func GoValue(t ColumnType, v Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case TypeInteger:
		return v.Int
	case TypeFloat:
		return v.Float
	case TypeBoolean:
		return v.Bool
	case TypeBytes, TypeCRDT:
		if v.Bytes == nil {
			return []byte{}
		}
		return v.Bytes
	}
	return v.Str
}

// Int64Of is v as an int64 when v is a Go integer of any size that fits;
// false for anything else (floats and strings included).
func Int64Of(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x), true
		}
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// ValueOf converts a Go value to a value of a column of type t. It
// accepts nil (NULL), a Value as is, strings for string, json and
// blob_ref columns (a json column also takes json.RawMessage, []byte or
// any value json.Marshal accepts), Go integers for integer columns, Go
// integers and floats for float columns, bool, and []byte for bytes and
// crdt columns.
func ValueOf(t ColumnType, v any) (Value, error) {
	switch x := v.(type) {
	case nil:
		return Value{Null: true}, nil
	case Value:
		return x, nil
	}
	switch t {
	case TypeString, TypeBlobRef:
		if s, ok := v.(string); ok {
			return Value{Str: s}, nil
		}
	case TypeJSON:
		switch x := v.(type) {
		case string:
			return Value{Str: x}, nil
		case json.RawMessage:
			return Value{Str: string(x)}, nil
		case []byte:
			return Value{Str: string(x)}, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return Value{}, err
		}
		return Value{Str: string(b)}, nil
	case TypeInteger:
		if n, ok := Int64Of(v); ok {
			return Value{Int: n}, nil
		}
	case TypeFloat:
		switch x := v.(type) {
		case float64:
			return Value{Float: x}, nil
		case float32:
			return Value{Float: float64(x)}, nil
		}
		if n, ok := Int64Of(v); ok {
			return Value{Float: float64(n)}, nil
		}
	case TypeBoolean:
		if b, ok := v.(bool); ok {
			return Value{Bool: b}, nil
		}
	case TypeBytes, TypeCRDT:
		if b, ok := v.([]byte); ok {
			return Value{Bytes: b}, nil
		}
	}
	return Value{}, fmt.Errorf("a %T cannot be stored in a %s column", v, t)
}
