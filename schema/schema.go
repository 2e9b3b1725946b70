// Package schema is the schema IR of SSP2 (§2.4) and its compiler.
//
// A [Schema] declares the synced tables: their columns in row-codec order,
// primary key, scope patterns (§3.1), indexes, declared references (§6.11)
// and materialization. It comes from JSON ([ParseJSON], the shape that
// typegen emits and that conformance mode posts) or from Go ([New]).
//
// [Compile] validates a Schema and derives what the server needs at run
// time: column positions, scope-pattern extraction, the union of declared
// scope variables, physical index names, and the stored column [Layout]
// that a database records next to its schema version. The compiled form is
// immutable and safe for concurrent use.
//
// Section numbers (§) refer to the protocol specification, SPEC.md of
// syncular/syncular.
package schema

import (
	"encoding/json"
	"slices"

	"github.com/syncgo/syncgo/wire"
)

// Schema is one version of the schema IR: the tables a server syncs, in
// bootstrap order (§4.7).
type Schema struct {
	// Version is the application schema version (§9); at least 1.
	Version int32
	// Tables in bootstrap order.
	Tables []Table
}

// Table is one synced table.
type Table struct {
	// Name is the table's name, a portable identifier.
	Name string
	// PrimaryKey names the column whose value renders the change rowId
	// (§2.2). Its type must be string, integer, boolean or json (§2.4).
	PrimaryKey string
	// Columns in declaration order, which is the row-codec order (§2.4).
	Columns []Column
	// Scopes are the table's scope patterns (§3.1); at least one.
	Scopes []Scope
	// Indexes are declared secondary indexes, created on the server's
	// relational projection when the table is materialized.
	Indexes []Index
	// References are declared references to parent tables (§6.11).
	References []Reference
	// FTSIndexes holds the client-local FTS5 projections (§2.4) verbatim.
	// They never reach the server's storage; the server ignores them.
	FTSIndexes json.RawMessage
	// Materialize overrides whether the server stores the typed app
	// columns next to the row payload. Nil means the default: on, unless
	// every column other than the primary key and the scope columns is
	// encrypted.
	Materialize *bool
}

// Column is one column of a table.
type Column struct {
	// Name is the column's name, a portable identifier.
	Name string
	// Type is the wire type. An encrypted column has type bytes.
	Type wire.ColumnType
	// Nullable reports whether the column accepts NULL.
	Nullable bool
	// CRDTType names the server merger of a crdt column (§5.10.1), for
	// example [CRDTYjsDoc]. It is required for crdt columns and not allowed
	// on any other.
	CRDTType string
	// Encrypted marks a column encrypted end to end by clients (§5.11).
	Encrypted bool
	// DeclaredType is the application type of an encrypted column
	// ("string", "json", "integer", ...), required when Encrypted is set
	// and not allowed otherwise.
	DeclaredType string
}

// CRDTYjsDoc is the one crdtType that the specification defines (§5.10.1).
const CRDTYjsDoc = "yjs-doc"

// Scope is one scope pattern of a table (§3.1).
type Scope struct {
	// Pattern is "prefix:{variable}" with exactly one variable.
	Pattern string
	// Column names the column whose value is the variable's stored scope
	// value. Empty means the column named like the variable.
	Column string
}

// Index is a declared secondary index.
type Index struct {
	// Name is the declared index name, a portable identifier unique in the
	// schema. The physical name is [PhysicalIndexName] of it.
	Name string
	// Columns are the indexed columns, in order.
	Columns []string
	// Unique marks a unique index.
	Unique bool
}

// Reference is a declared reference from a child column to the primary key
// of a parent table (§6.11).
type Reference struct {
	// Column is the child column holding the parent's primary key.
	Column string
	// ParentTable names the referenced table.
	ParentTable string
	// OnDelete is what deleting a parent does to its children:
	// [OnDeleteRestrict] (also when empty), [OnDeleteCascade] or
	// [OnDeleteSetNull].
	OnDelete string
}

// The ON DELETE actions of a declared reference (§6.11).
const (
	OnDeleteRestrict = "RESTRICT"
	OnDeleteCascade  = "CASCADE"
	OnDeleteSetNull  = "SET NULL"
)

// clone returns a deep copy of s, so that a compiled schema never shares
// memory with the value its caller may go on modifying.
func (s *Schema) clone() *Schema {
	out := &Schema{Version: s.Version, Tables: slices.Clone(s.Tables)}
	for i := range out.Tables {
		t := &out.Tables[i]
		t.Columns = slices.Clone(t.Columns)
		t.Scopes = slices.Clone(t.Scopes)
		t.Indexes = slices.Clone(t.Indexes)
		for j := range t.Indexes {
			t.Indexes[j].Columns = slices.Clone(t.Indexes[j].Columns)
		}
		t.References = slices.Clone(t.References)
		t.FTSIndexes = slices.Clone(t.FTSIndexes)
		if t.Materialize != nil {
			m := *t.Materialize
			t.Materialize = &m
		}
	}
	return out
}
