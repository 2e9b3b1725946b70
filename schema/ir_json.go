package schema

import (
	"bytes"
	"encoding/json"

	"github.com/syncgo/syncgo/wire"
)

// ParseJSON reads a schema IR document:
//
//	{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
//	  "columns": [{"name": "id", "type": "string", "nullable": false}, ...],
//	  "scopes": ["project:{project_id}", {"pattern": "...", "column": "..."}],
//	  "indexes": [{"name": "...", "columns": ["..."], "unique": false}],
//	  "references": [{"column": "...", "parentTable": "...", "onDelete": "CASCADE"}],
//	  "ftsIndexes": [...], "materialize": true}]}
//
// Columns may also carry "crdtType", "encrypted" and "declaredType". A
// field the IR does not define, a duplicate field or a value of the wrong
// JSON type is an error naming its path, for example
// `tables[1].columns[0]: unknown field "nulable"`. ParseJSON checks the
// shape only; [Compile] checks the meaning.
func ParseJSON(data []byte) (*Schema, error) {
	s := new(Schema)
	if err := s.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return s, nil
}

// UnmarshalJSON reads a schema IR document as [ParseJSON] does, so that a
// Schema can be a field of a larger JSON message.
func (s *Schema) UnmarshalJSON(data []byte) error {
	members, err := decodeObject("", data, "version", "tables")
	if err != nil {
		return err
	}
	var out Schema
	m, err := required("", members, "version")
	if err != nil {
		return err
	}
	if out.Version, err = decodeInt32(m.path, m.value); err != nil {
		return err
	}
	if m, err = required("", members, "tables"); err != nil {
		return err
	}
	elems, err := decodeArray(m.path, m.value)
	if err != nil {
		return err
	}
	out.Tables = make([]Table, len(elems))
	for i, raw := range elems {
		if out.Tables[i], err = parseTable(elemPath("tables", i), raw); err != nil {
			return err
		}
	}
	*s = out
	return nil
}

func parseTable(path string, raw json.RawMessage) (Table, error) {
	var t Table
	members, err := decodeObject(path, raw, "name", "primaryKey", "columns", "scopes",
		"indexes", "references", "ftsIndexes", "materialize")
	if err != nil {
		return t, err
	}
	if t.Name, err = requiredString(path, members, "name"); err != nil {
		return t, err
	}
	if t.PrimaryKey, err = requiredString(path, members, "primaryKey"); err != nil {
		return t, err
	}
	if err := eachElem(path, members, "columns", true, func(p string, raw json.RawMessage) error {
		c, err := parseColumn(p, raw)
		t.Columns = append(t.Columns, c)
		return err
	}); err != nil {
		return t, err
	}
	if err := eachElem(path, members, "scopes", true, func(p string, raw json.RawMessage) error {
		sc, err := parseScope(p, raw)
		t.Scopes = append(t.Scopes, sc)
		return err
	}); err != nil {
		return t, err
	}
	if err := eachElem(path, members, "indexes", false, func(p string, raw json.RawMessage) error {
		ix, err := parseIndex(p, raw)
		t.Indexes = append(t.Indexes, ix)
		return err
	}); err != nil {
		return t, err
	}
	if err := eachElem(path, members, "references", false, func(p string, raw json.RawMessage) error {
		r, err := parseReference(p, raw)
		t.References = append(t.References, r)
		return err
	}); err != nil {
		return t, err
	}
	if m, ok := optional(members, "ftsIndexes"); ok {
		t.FTSIndexes = append(json.RawMessage(nil), m.value...)
	}
	if m, ok := optional(members, "materialize"); ok {
		b, err := decodeBool(m.path, m.value)
		if err != nil {
			return t, err
		}
		t.Materialize = &b
	}
	return t, nil
}

func parseColumn(path string, raw json.RawMessage) (Column, error) {
	var c Column
	members, err := decodeObject(path, raw, "name", "type", "nullable", "crdtType", "encrypted", "declaredType")
	if err != nil {
		return c, err
	}
	if c.Name, err = requiredString(path, members, "name"); err != nil {
		return c, err
	}
	typeName, err := requiredString(path, members, "type")
	if err != nil {
		return c, err
	}
	var ok bool
	if c.Type, ok = wire.ParseColumnType(typeName); !ok {
		return c, errorAt(fieldPath(path, "type"), "unknown column type %q", typeName)
	}
	m, err := required(path, members, "nullable")
	if err != nil {
		return c, err
	}
	if c.Nullable, err = decodeBool(m.path, m.value); err != nil {
		return c, err
	}
	if m, ok := optional(members, "crdtType"); ok {
		if c.CRDTType, err = decodeString(m.path, m.value); err != nil {
			return c, err
		}
	}
	if m, ok := optional(members, "encrypted"); ok {
		if c.Encrypted, err = decodeBool(m.path, m.value); err != nil {
			return c, err
		}
	}
	if m, ok := optional(members, "declaredType"); ok {
		if c.DeclaredType, err = decodeString(m.path, m.value); err != nil {
			return c, err
		}
	}
	return c, nil
}

// parseScope reads a bare pattern string or a {pattern, column} object.
func parseScope(path string, raw json.RawMessage) (Scope, error) {
	var sc Scope
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		pattern, err := decodeString(path, raw)
		if err != nil {
			return sc, errorAt(path, "expected a pattern string or an object")
		}
		return Scope{Pattern: pattern}, nil
	}
	members, err := decodeObject(path, raw, "pattern", "column")
	if err != nil {
		return sc, err
	}
	if sc.Pattern, err = requiredString(path, members, "pattern"); err != nil {
		return sc, err
	}
	if m, ok := optional(members, "column"); ok {
		sc.Column, err = decodeString(m.path, m.value)
	}
	return sc, err
}

func parseIndex(path string, raw json.RawMessage) (Index, error) {
	var ix Index
	members, err := decodeObject(path, raw, "name", "columns", "unique")
	if err != nil {
		return ix, err
	}
	if ix.Name, err = requiredString(path, members, "name"); err != nil {
		return ix, err
	}
	if err := eachElem(path, members, "columns", true, func(p string, raw json.RawMessage) error {
		c, err := decodeString(p, raw)
		ix.Columns = append(ix.Columns, c)
		return err
	}); err != nil {
		return ix, err
	}
	if m, ok := optional(members, "unique"); ok {
		ix.Unique, err = decodeBool(m.path, m.value)
	}
	return ix, err
}

func parseReference(path string, raw json.RawMessage) (Reference, error) {
	var r Reference
	members, err := decodeObject(path, raw, "column", "parentTable", "onDelete")
	if err != nil {
		return r, err
	}
	if r.Column, err = requiredString(path, members, "column"); err != nil {
		return r, err
	}
	if r.ParentTable, err = requiredString(path, members, "parentTable"); err != nil {
		return r, err
	}
	if m, ok := optional(members, "onDelete"); ok {
		r.OnDelete, err = decodeString(m.path, m.value)
	}
	return r, err
}

func requiredString(path string, members []member, name string) (string, error) {
	m, err := required(path, members, name)
	if err != nil {
		return "", err
	}
	return decodeString(m.path, m.value)
}

// eachElem calls fn with the path and value of every element of the array
// member name; an absent or null member is an error only when must is set.
func eachElem(path string, members []member, name string, must bool, fn func(string, json.RawMessage) error) error {
	m, ok := optional(members, name)
	if !ok {
		if must {
			return errorAt(path, "missing field %q", name)
		}
		return nil
	}
	elems, err := decodeArray(m.path, m.value)
	if err != nil {
		return err
	}
	for i, raw := range elems {
		if err := fn(elemPath(m.path, i), raw); err != nil {
			return err
		}
	}
	return nil
}
