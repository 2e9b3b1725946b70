package schema

import (
	"slices"

	"github.com/syncgo/syncgo/wire"
)

// Compiled is a validated schema with what the server derives from it. It
// is immutable; the slices its methods return are shared and must not be
// modified.
type Compiled struct {
	version   int32
	tables    []*CompiledTable
	byName    map[string]*CompiledTable
	variables []string
}

// Version returns the schema version (§9).
func (c *Compiled) Version() int32 { return c.version }

// Tables returns the tables in bootstrap order.
func (c *Compiled) Tables() []*CompiledTable { return c.tables }

// Table returns the table named name.
func (c *Compiled) Table(name string) (*CompiledTable, bool) {
	t, ok := c.byName[name]
	return t, ok
}

// Variables returns the union of the scope variables that any table
// declares, sorted: the keys an allowed-scopes map may hold (§3.2 rule 3).
func (c *Compiled) Variables() []string { return c.variables }

// DeclaresVariable reports whether any table declares the scope variable.
func (c *Compiled) DeclaresVariable(variable string) bool {
	_, ok := slices.BinarySearch(c.variables, variable)
	return ok
}

// CompiledTable is one table of a [Compiled] schema.
type CompiledTable struct {
	name           string
	columns        []Column
	wireColumns    []wire.Column
	codec          *wire.RowCodec
	columnIndex    map[string]int
	primaryKey     int
	scopes         []CompiledScope
	patterns       []string // every well-formed pattern, sorted
	variables      []string
	variableColumn map[string]int
	indexes        []CompiledIndex
	references     []CompiledReference
	referencedBy   []IncomingReference
	materialize    bool
	blobRefs       []int
	crdts          []int
	encrypted      []int
}

// CompiledScope is a scope pattern resolved to its column.
type CompiledScope struct {
	Pattern     Pattern
	Column      string
	ColumnIndex int
}

// CompiledIndex is a declared index with its physical name.
type CompiledIndex struct {
	Name string
	// PhysicalName is [PhysicalIndexName] of Name.
	PhysicalName string
	Columns      []string
	Unique       bool
}

// CompiledReference is a declared reference of the table to a parent.
type CompiledReference struct {
	Column      string
	ColumnIndex int
	ParentTable string
	// OnDelete is RESTRICT, CASCADE or SET NULL, never empty.
	OnDelete string
}

// IncomingReference is a reference that another table declares to this
// one: the children to reach when a row of this table is deleted (§6.11).
type IncomingReference struct {
	// Table and Column name the child table and its reference column.
	Table       string
	Column      string
	ColumnIndex int
	OnDelete    string
	// Index is the declared single-column index on the child column.
	Index string
}

// Name returns the table's name.
func (t *CompiledTable) Name() string { return t.name }

// Columns returns the columns in row-codec order.
func (t *CompiledTable) Columns() []Column { return t.columns }

// WireColumns returns the columns as the row codec and rows segments see
// them: name, type and nullability.
func (t *CompiledTable) WireColumns() []wire.Column { return t.wireColumns }

// RowCodec returns the table's row codec (§2.4), full and sparse rows.
func (t *CompiledTable) RowCodec() *wire.RowCodec { return t.codec }

// ColumnIndex returns the position of the column named name.
func (t *CompiledTable) ColumnIndex(name string) (int, bool) {
	i, ok := t.columnIndex[name]
	return i, ok
}

// PrimaryKey returns the position of the primary-key column.
func (t *CompiledTable) PrimaryKey() int { return t.primaryKey }

// Scopes returns the scope patterns in declaration order.
func (t *CompiledTable) Scopes() []CompiledScope { return t.scopes }

// Variables returns the scope variables the table declares, in the order
// its patterns first name them.
func (t *CompiledTable) Variables() []string { return t.variables }

// VariableColumn returns the position of the column that holds the scope
// variable's value.
func (t *CompiledTable) VariableColumn(variable string) (int, bool) {
	i, ok := t.variableColumn[variable]
	return i, ok
}

// Indexes returns the declared indexes.
func (t *CompiledTable) Indexes() []CompiledIndex { return t.indexes }

// References returns the table's declared references to parent tables.
func (t *CompiledTable) References() []CompiledReference { return t.references }

// ReferencedBy returns the references that tables declare to this one, in
// table order.
func (t *CompiledTable) ReferencedBy() []IncomingReference { return t.referencedBy }

// Materialize reports whether the server stores the typed app columns
// next to the row payload: the table's explicit setting, or else true
// unless every column other than the primary key and the scope columns is
// encrypted.
func (t *CompiledTable) Materialize() bool { return t.materialize }

// BlobRefColumns returns the positions of the blob_ref columns (§5.9).
func (t *CompiledTable) BlobRefColumns() []int { return t.blobRefs }

// CRDTColumns returns the positions of the crdt columns (§5.10); each
// column's CRDTType names its merger.
func (t *CompiledTable) CRDTColumns() []int { return t.crdts }

// EncryptedColumns returns the positions of the encrypted columns (§5.11).
func (t *CompiledTable) EncryptedColumns() []int { return t.encrypted }
