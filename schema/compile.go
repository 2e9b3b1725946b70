package schema

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/wire"
)

// Compile validates s and derives its [Compiled] form. It reports every
// problem it finds, joined with [errors.Join], each naming its table and,
// where one applies, its column, index or scope pattern. The result does
// not share memory with s.
//
// The rules are those the reference server and typegen enforce: portable
// identifiers (see [MaxIdentifierBytes]) unique in their namespace, names
// compared without regard to case as SQLite compares them; a version of at
// least 1; a non-nullable primary key of type string, integer, boolean or
// json (§2.4); at least one scope pattern per table, each resolving to a
// plaintext column with a string form, and one column per variable (§3.1);
// crdtType on crdt columns only (§5.10.1); type bytes and a declaredType on
// encrypted columns only (§5.11); index columns that exist; references to
// an existing parent whose primary key has the child column's type, whose
// scope patterns equal the child's, through a declared single-column index
// on the child column (§6.11).
func Compile(s *Schema) (*Compiled, error) {
	if s == nil {
		return nil, errors.New("compile schema: nil schema")
	}
	s = s.clone()
	var errs []error
	if s.Version < 1 {
		errs = append(errs, fmt.Errorf("schema version %d must be at least 1", s.Version))
	}
	c := &Compiled{version: s.Version, byName: make(map[string]*CompiledTable, len(s.Tables))}
	tableNames := make(map[string]string)    // folded name → name
	indexOwners := make(map[string]string)   // folded declared name → table
	physicalNames := make(map[string]string) // physical name → declared name
	for i := range s.Tables {
		t := &s.Tables[i]
		if prev, dup := tableNames[strings.ToLower(t.Name)]; dup {
			errs = append(errs, fmt.Errorf("duplicate table %q%s", t.Name, caseNote(prev, t.Name)))
			continue
		}
		tableNames[strings.ToLower(t.Name)] = t.Name
		tc := &tableCompiler{table: t}
		ct := tc.compile()
		for _, ix := range ct.indexes {
			folded := strings.ToLower(ix.Name)
			if owner, dup := indexOwners[folded]; dup {
				tc.addf("duplicate index %q (index names are unique in the schema; another is declared on table %q)", ix.Name, owner)
				continue
			}
			indexOwners[folded] = t.Name
			if other, dup := physicalNames[ix.PhysicalName]; dup {
				tc.addf("index %q has the physical name %q of index %q", ix.Name, ix.PhysicalName, other)
				continue
			}
			physicalNames[ix.PhysicalName] = ix.Name
		}
		errs = append(errs, tc.errs...)
		c.tables = append(c.tables, ct)
		c.byName[t.Name] = ct
	}
	errs = append(errs, resolveReferences(c)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, t := range c.tables {
		codec, err := wire.NewRowCodec(t.wireColumns, t.columns[t.primaryKey].Name)
		if err != nil { // unreachable: the checks above are stricter
			return nil, fmt.Errorf("table %q: %w", t.name, err)
		}
		t.codec = codec
	}
	seen := make(map[string]bool)
	for _, t := range c.tables {
		for _, v := range t.variables {
			if !seen[v] {
				seen[v] = true
				c.variables = append(c.variables, v)
			}
		}
	}
	slices.Sort(c.variables)
	return c, nil
}

// tableCompiler compiles one table and collects its problems.
type tableCompiler struct {
	table *Table
	out   *CompiledTable
	errs  []error
}

func (tc *tableCompiler) addf(format string, args ...any) {
	tc.errs = append(tc.errs, fmt.Errorf("table %q: %s", tc.table.Name, fmt.Sprintf(format, args...)))
}

func (tc *tableCompiler) compile() *CompiledTable {
	t := tc.table
	tc.out = &CompiledTable{
		name:           t.Name,
		columns:        t.Columns,
		columnIndex:    make(map[string]int, len(t.Columns)),
		primaryKey:     -1,
		variableColumn: make(map[string]int),
	}
	if err := checkIdentifier("table", t.Name); err != nil {
		tc.errs = append(tc.errs, err)
	}
	tc.columns()
	tc.primaryKey()
	tc.scopes()
	tc.indexes()
	tc.references()
	tc.materialize()
	if !tc.out.materialize {
		// Indexes and references work on the typed columns, which only a
		// materialized table stores: refuse what would silently do nothing.
		if len(tc.out.indexes) > 0 {
			tc.addf("declares indexes but is not materialized: an index needs the typed columns a materialized table stores (set materialize: true, or drop the indexes)")
		}
		if len(tc.out.references) > 0 {
			tc.addf("declares references but is not materialized: the server finds a parent's children through the reference column, which only a materialized table stores (set materialize: true)")
		}
	}
	return tc.out
}

func (tc *tableCompiler) columns() {
	out := tc.out
	folded := make(map[string]string)
	for i, c := range tc.table.Columns {
		if err := checkIdentifier("column", c.Name); err != nil {
			tc.addf("%v", err)
		}
		if prev, dup := folded[strings.ToLower(c.Name)]; dup {
			tc.addf("duplicate column %q%s", c.Name, caseNote(prev, c.Name))
		} else {
			folded[strings.ToLower(c.Name)] = c.Name
			out.columnIndex[c.Name] = i
		}
		out.wireColumns = append(out.wireColumns, wire.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable})
		tc.columnKind(c)
		switch {
		case c.Type == wire.TypeBlobRef:
			out.blobRefs = append(out.blobRefs, i)
		case c.Type == wire.TypeCRDT:
			out.crdts = append(out.crdts, i)
		}
		if c.Encrypted {
			out.encrypted = append(out.encrypted, i)
		}
	}
}

// columnKind checks a column's type against its crdt and encryption
// metadata.
func (tc *tableCompiler) columnKind(c Column) {
	if !c.Type.Valid() {
		tc.addf("column %q: invalid column type %d", c.Name, c.Type)
		return
	}
	switch {
	case c.Type == wire.TypeCRDT && c.CRDTType == "":
		tc.addf("column %q: a crdt column must declare a crdtType (§5.10.1)", c.Name)
	case c.Type != wire.TypeCRDT && c.CRDTType != "":
		tc.addf("column %q: crdtType %q is only for crdt columns, and the type is %s", c.Name, c.CRDTType, c.Type)
	}
	if !c.Encrypted {
		if c.DeclaredType != "" {
			tc.addf("column %q: declaredType is only for encrypted columns (§5.11)", c.Name)
		}
		return
	}
	switch {
	case c.Type == wire.TypeCRDT:
		tc.addf("column %q: a crdt column cannot be encrypted: the server merges crdt state in plaintext (§5.11)", c.Name)
	case c.Type != wire.TypeBytes:
		tc.addf("column %q: an encrypted column has type bytes, not %s (§5.11)", c.Name, c.Type)
	}
	declared, ok := wire.ParseColumnType(c.DeclaredType)
	switch {
	case c.DeclaredType == "":
		tc.addf("column %q: an encrypted column must declare a declaredType (§5.11)", c.Name)
	case !ok:
		tc.addf("column %q: unknown declaredType %q", c.Name, c.DeclaredType)
	case declared == wire.TypeCRDT:
		tc.addf("column %q: declaredType crdt cannot be encrypted (§5.11)", c.Name)
	}
}

func (tc *tableCompiler) primaryKey() {
	pk := tc.table.PrimaryKey
	i, ok := tc.out.columnIndex[pk]
	if !ok {
		tc.addf("primary key %q is not a column", pk)
		return
	}
	tc.out.primaryKey = i
	c := tc.table.Columns[i]
	switch {
	case c.Encrypted:
		tc.addf("primary key %q cannot be encrypted: it renders the plaintext rowId (§5.11)", pk)
	case !primaryKeyEligible(c.Type):
		tc.addf("primary key %q has type %s; a primary key is string, integer, boolean or json (§2.4)", pk, c.Type)
	}
	if c.Nullable {
		tc.addf("primary key %q must not be nullable", pk)
	}
}

// primaryKeyEligible reports whether values of type t have a string form
// that every implementation renders identically (§2.4).
func primaryKeyEligible(t wire.ColumnType) bool {
	switch t {
	case wire.TypeString, wire.TypeInteger, wire.TypeBoolean, wire.TypeJSON:
		return true
	}
	return false
}

func (tc *tableCompiler) scopes() {
	if len(tc.table.Scopes) == 0 {
		tc.addf("every synced table declares at least one scope pattern (§3.1)")
		return
	}
	out := tc.out
	for _, sc := range tc.table.Scopes {
		p, err := ParsePattern(sc.Pattern)
		if err != nil {
			tc.addf("%v", err)
			continue
		}
		out.patterns = append(out.patterns, p.String())
		column := sc.Column
		if column == "" {
			column = p.Variable
		}
		i, ok := out.columnIndex[column]
		if !ok {
			tc.addf("scope pattern %q names unknown column %q", sc.Pattern, column)
			continue
		}
		if prev, seen := out.variableColumn[p.Variable]; seen {
			if prev != i {
				tc.addf("variable %q maps to two different columns, %q and %q (§3.1)", p.Variable, tc.table.Columns[prev].Name, column)
			}
		} else {
			out.variableColumn[p.Variable] = i
			out.variables = append(out.variables, p.Variable)
		}
		switch c := tc.table.Columns[i]; {
		case c.Encrypted:
			tc.addf("scope column %q cannot be encrypted: the server reads scope values in plaintext (§3.1, §5.11)", column)
		case c.Type == wire.TypeBytes || c.Type == wire.TypeCRDT:
			tc.addf("scope column %q has type %s, which has no string form for a scope value (§3.1, §5.10.1)", column, c.Type)
		}
		out.scopes = append(out.scopes, CompiledScope{Pattern: p, Column: column, ColumnIndex: i})
	}
	slices.Sort(out.patterns)
}

func (tc *tableCompiler) indexes() {
	for _, ix := range tc.table.Indexes {
		if err := checkIdentifier("index", ix.Name); err != nil {
			tc.addf("%v", err)
		}
		if len(ix.Columns) == 0 {
			tc.addf("index %q must name at least one column", ix.Name)
		}
		for j, col := range ix.Columns {
			if _, ok := tc.out.columnIndex[col]; !ok {
				tc.addf("index %q names unknown column %q", ix.Name, col)
			} else if slices.Contains(ix.Columns[:j], col) {
				tc.addf("index %q names column %q twice", ix.Name, col)
			}
		}
		tc.out.indexes = append(tc.out.indexes, CompiledIndex{
			Name:         ix.Name,
			PhysicalName: PhysicalIndexName(ix.Name),
			Columns:      ix.Columns,
			Unique:       ix.Unique,
		})
	}
}

// materialize resolves the table's materialization: explicit wins;
// otherwise on, unless every column other than the primary key and the
// scope columns is encrypted, since its projection would be ciphertext.
func (tc *tableCompiler) materialize() {
	if m := tc.table.Materialize; m != nil {
		tc.out.materialize = *m
		return
	}
	projectable, encrypted := 0, 0
	for i, c := range tc.table.Columns {
		if i == tc.out.primaryKey || slices.ContainsFunc(tc.out.scopes, func(s CompiledScope) bool { return s.ColumnIndex == i }) {
			continue
		}
		projectable++
		if c.Encrypted {
			encrypted++
		}
	}
	tc.out.materialize = projectable == 0 || encrypted < projectable
}
