package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The JSON shapes that MarshalJSON writes, members in the order typegen
// writes them. Optional members are left out when unset, so that a parsed
// document encodes back to the same IR.
type (
	schemaJSON struct {
		Version int32       `json:"version"`
		Tables  []tableJSON `json:"tables"`
	}
	tableJSON struct {
		Name        string          `json:"name"`
		PrimaryKey  string          `json:"primaryKey"`
		Columns     []columnJSON    `json:"columns"`
		Scopes      []scopeJSON     `json:"scopes"`
		Indexes     []indexJSON     `json:"indexes,omitempty"`
		References  []referenceJSON `json:"references,omitempty"`
		FTSIndexes  json.RawMessage `json:"ftsIndexes,omitempty"`
		Materialize *bool           `json:"materialize,omitempty"`
	}
	columnJSON struct {
		Name         string `json:"name"`
		Type         string `json:"type"`
		Nullable     bool   `json:"nullable"`
		CRDTType     string `json:"crdtType,omitempty"`
		Encrypted    bool   `json:"encrypted,omitempty"`
		DeclaredType string `json:"declaredType,omitempty"`
	}
	scopeJSON struct {
		Pattern string `json:"pattern"`
		Column  string `json:"column,omitempty"`
	}
	indexJSON struct {
		Name    string   `json:"name"`
		Columns []string `json:"columns"`
		Unique  bool     `json:"unique"`
	}
	referenceJSON struct {
		Column      string `json:"column"`
		ParentTable string `json:"parentTable"`
		OnDelete    string `json:"onDelete,omitempty"`
	}
)

// MarshalJSON encodes the schema in the shape [ParseJSON] reads. A scope
// without an explicit column encodes as a bare pattern string. It fails on
// a column type that has no IR name.
func (s Schema) MarshalJSON() ([]byte, error) {
	out := schemaJSON{Version: s.Version, Tables: make([]tableJSON, len(s.Tables))}
	for i, t := range s.Tables {
		tj := tableJSON{
			Name:        t.Name,
			PrimaryKey:  t.PrimaryKey,
			Columns:     make([]columnJSON, len(t.Columns)),
			Scopes:      make([]scopeJSON, len(t.Scopes)),
			Materialize: t.Materialize,
		}
		for j, c := range t.Columns {
			if !c.Type.Valid() {
				return nil, fmt.Errorf("encode schema: table %q: column %q: invalid column type %d", t.Name, c.Name, c.Type)
			}
			tj.Columns[j] = columnJSON{c.Name, c.Type.String(), c.Nullable, c.CRDTType, c.Encrypted, c.DeclaredType}
		}
		for j, sc := range t.Scopes {
			tj.Scopes[j] = scopeJSON(sc)
		}
		for _, ix := range t.Indexes {
			cols := ix.Columns
			if cols == nil {
				cols = []string{}
			}
			tj.Indexes = append(tj.Indexes, indexJSON{ix.Name, cols, ix.Unique})
		}
		for _, r := range t.References {
			tj.References = append(tj.References, referenceJSON(r))
		}
		if len(bytes.TrimSpace(t.FTSIndexes)) > 0 {
			tj.FTSIndexes = t.FTSIndexes
		}
		out.Tables[i] = tj
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MarshalJSON encodes a scope with no explicit column as the bare pattern
// string and any other as {"pattern": ..., "column": ...}.
func (s scopeJSON) MarshalJSON() ([]byte, error) {
	if s.Column == "" {
		return json.Marshal(s.Pattern)
	}
	type object scopeJSON // without this method
	return json.Marshal(object(s))
}
