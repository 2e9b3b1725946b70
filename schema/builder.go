package schema

import "github.com/syncgo/syncgo/wire"

// Builder builds a [Schema] in Go, for servers that embed their schema
// rather than read it from JSON:
//
//	compiled, err := schema.New(1).
//		Table("tasks", "id",
//			schema.String("id"),
//			schema.String("project_id"),
//			schema.String("title").Null(),
//			schema.CRDT("notes", schema.CRDTYjsDoc).Null(),
//		).
//		Scope("project:{project_id}").
//		Index("tasks_by_project", "project_id").
//		Compile()
//
// A Builder records what it is told; [Compile] validates it.
type Builder struct {
	s Schema
}

// New starts a schema of the given version.
func New(version int32) *Builder {
	return &Builder{s: Schema{Version: version}}
}

// Table appends a table with its primary key and columns, in row-codec
// order, and returns the builder of that table.
func (b *Builder) Table(name, primaryKey string, columns ...Column) *TableBuilder {
	b.s.Tables = append(b.s.Tables, Table{
		Name:       name,
		PrimaryKey: primaryKey,
		Columns:    append([]Column(nil), columns...),
	})
	return &TableBuilder{Builder: b, table: len(b.s.Tables) - 1}
}

// Schema returns a copy of the schema built so far.
func (b *Builder) Schema() *Schema { return b.s.clone() }

// Compile compiles the schema built so far.
func (b *Builder) Compile() (*Compiled, error) { return Compile(&b.s) }

// TableBuilder adds scopes, indexes, references and settings to the table
// its [Builder.Table] call appended. Its Table, Schema and Compile methods
// are the Builder's, so one chain can declare a whole schema.
type TableBuilder struct {
	*Builder
	table int
}

func (t *TableBuilder) cur() *Table { return &t.s.Tables[t.table] }

// Scope adds the scope pattern "prefix:{variable}", whose value is the
// column named like the variable.
func (t *TableBuilder) Scope(pattern string) *TableBuilder {
	t.cur().Scopes = append(t.cur().Scopes, Scope{Pattern: pattern})
	return t
}

// ScopeColumn adds a scope pattern whose value is the named column.
func (t *TableBuilder) ScopeColumn(pattern, column string) *TableBuilder {
	t.cur().Scopes = append(t.cur().Scopes, Scope{Pattern: pattern, Column: column})
	return t
}

// Index declares an index over columns.
func (t *TableBuilder) Index(name string, columns ...string) *TableBuilder {
	t.cur().Indexes = append(t.cur().Indexes, Index{Name: name, Columns: append([]string(nil), columns...)})
	return t
}

// UniqueIndex declares a unique index over columns.
func (t *TableBuilder) UniqueIndex(name string, columns ...string) *TableBuilder {
	t.cur().Indexes = append(t.cur().Indexes, Index{Name: name, Columns: append([]string(nil), columns...), Unique: true})
	return t
}

// Reference declares that column holds the primary key of a row of
// parentTable, with an ON DELETE action ([OnDeleteRestrict],
// [OnDeleteCascade], [OnDeleteSetNull]; empty means RESTRICT). The column
// also needs a single-column index.
func (t *TableBuilder) Reference(column, parentTable, onDelete string) *TableBuilder {
	t.cur().References = append(t.cur().References, Reference{Column: column, ParentTable: parentTable, OnDelete: onDelete})
	return t
}

// Materialize sets whether the server stores the table's typed columns,
// overriding the default.
func (t *TableBuilder) Materialize(on bool) *TableBuilder {
	t.cur().Materialize = &on
	return t
}

// String returns a non-nullable string column.
func String(name string) Column { return Column{Name: name, Type: wire.TypeString} }

// Integer returns a non-nullable integer column.
func Integer(name string) Column { return Column{Name: name, Type: wire.TypeInteger} }

// Float returns a non-nullable float column.
func Float(name string) Column { return Column{Name: name, Type: wire.TypeFloat} }

// Boolean returns a non-nullable boolean column.
func Boolean(name string) Column { return Column{Name: name, Type: wire.TypeBoolean} }

// JSON returns a non-nullable json column.
func JSON(name string) Column { return Column{Name: name, Type: wire.TypeJSON} }

// Bytes returns a non-nullable bytes column.
func Bytes(name string) Column { return Column{Name: name, Type: wire.TypeBytes} }

// BlobRef returns a non-nullable blob_ref column (§5.9).
func BlobRef(name string) Column { return Column{Name: name, Type: wire.TypeBlobRef} }

// CRDT returns a non-nullable crdt column merged by the named merger
// (§5.10.1), usually [CRDTYjsDoc].
func CRDT(name, crdtType string) Column {
	return Column{Name: name, Type: wire.TypeCRDT, CRDTType: crdtType}
}

// Encrypted returns a non-nullable column that clients encrypt (§5.11):
// type bytes on the wire, declared holds the application type.
func Encrypted(name string, declared wire.ColumnType) Column {
	return Column{Name: name, Type: wire.TypeBytes, Encrypted: true, DeclaredType: declared.String()}
}

// Null returns c made nullable.
func (c Column) Null() Column {
	c.Nullable = true
	return c
}
