package schema

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/wire"
)

// ColumnLayout is what the bytes of an encoded row depend on for one
// column: its name, type and nullability.
type ColumnLayout struct {
	Name     string
	Type     wire.ColumnType
	Nullable bool
}

// TableLayout is the column layout of one table, in row-codec order.
type TableLayout struct {
	Table   string
	Columns []ColumnLayout
}

// Layout is the stored layout marker: the column layout of every table, in
// table order. A database records it next to its schema version so that a
// later server can decode the rows it holds and check a migration. In JSON
// it is {"table": [{"name", "type", "nullable"}, ...], ...}, byte for byte
// the layouts column of the reference server's sync_schema_meta, so that
// the two servers can share a database.
type Layout []TableLayout

// Layout returns the layout marker of the schema.
func (c *Compiled) Layout() Layout {
	out := make(Layout, len(c.tables))
	for i, t := range c.tables {
		cols := make([]ColumnLayout, len(t.columns))
		for j, col := range t.columns {
			cols[j] = ColumnLayout{Name: col.Name, Type: col.Type, Nullable: col.Nullable}
		}
		out[i] = TableLayout{Table: t.name, Columns: cols}
	}
	return out
}

// Table returns the column layout of the table named name.
func (l Layout) Table(name string) ([]ColumnLayout, bool) {
	for _, t := range l {
		if t.Table == name {
			return t.Columns, true
		}
	}
	return nil, false
}

// MarshalJSON encodes the layout as the reference server does, with no
// white space. It fails on a column type that has no IR name. As with
// [StoredScopes.MarshalJSON], json.Marshal may re-escape a name that holds
// <, >, & or U+2028; compiled names never do.
func (l Layout) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, t := range l {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(jsonString(t.Table))
		buf.WriteString(":[")
		for j, c := range t.Columns {
			if !c.Type.Valid() {
				return nil, fmt.Errorf("encode layout: table %q: column %q: invalid column type %d", t.Table, c.Name, c.Type)
			}
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, `{"name":%s,"type":"%s","nullable":%t}`, jsonString(c.Name), c.Type, c.Nullable)
		}
		buf.WriteByte(']')
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// ParseLayout reads a stored layout marker. Empty input and JSON null read
// as an empty layout, as the reference server reads them.
func ParseLayout(data []byte) (Layout, error) {
	var l Layout
	if err := l.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return l, nil
}

// UnmarshalJSON reads a stored layout marker, keeping its table order.
// Members of a column other than name, type and nullable are ignored.
func (l *Layout) UnmarshalJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 || isNull(data) {
		*l = Layout{}
		return nil
	}
	tables, err := decodeObject("", data)
	if err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	out := make(Layout, 0, len(tables))
	for _, t := range tables {
		elems, err := decodeArray(t.path, t.value)
		if err != nil {
			return fmt.Errorf("layout: %w", err)
		}
		tl := TableLayout{Table: t.name, Columns: make([]ColumnLayout, len(elems))}
		for i, raw := range elems {
			if tl.Columns[i], err = parseColumnLayout(elemPath(t.path, i), raw); err != nil {
				return fmt.Errorf("layout: %w", err)
			}
		}
		out = append(out, tl)
	}
	*l = out
	return nil
}

func parseColumnLayout(path string, raw []byte) (ColumnLayout, error) {
	var c ColumnLayout
	members, err := decodeObject(path, raw)
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
	c.Nullable, err = decodeBool(m.path, m.value)
	return c, err
}

// CheckAppendOnly reports whether moving stored rows from the layout old to
// the layout next is a migration the server can make: for every table in
// both, the old columns are an exact prefix (name, type, nullability) of
// the new ones and every appended column is nullable, since stored rows
// have no value for it. Tables only in old are retired and tables only in
// next are created, both allowed. It reports every offending table.
func CheckAppendOnly(old, next Layout) error {
	var errs []error
	for _, t := range next {
		before, ok := old.Table(t.Table)
		if !ok {
			continue
		}
		if len(before) > len(t.Columns) {
			errs = append(errs, fmt.Errorf("table %q: the schema removed columns; only appending nullable columns is supported", t.Table))
			continue
		}
		for i, b := range before {
			if a := t.Columns[i]; a != b {
				errs = append(errs, fmt.Errorf("table %q: column %d changed from %s to %s; only appending nullable columns is supported", t.Table, i, b, a))
			}
		}
		for _, a := range t.Columns[len(before):] {
			if !a.Nullable {
				errs = append(errs, fmt.Errorf("table %q: added column %q must be nullable: stored rows have no value for it", t.Table, a.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// String returns the column for messages, as in `"title" string null`.
func (c ColumnLayout) String() string {
	if c.Nullable {
		return fmt.Sprintf("%q %s null", c.Name, c.Type)
	}
	return fmt.Sprintf("%q %s not null", c.Name, c.Type)
}

// RetiredTables returns the tables of old that next no longer has, sorted:
// the tables a schema upgrade drops.
func RetiredTables(old, next Layout) []string {
	var out []string
	for _, t := range old {
		if _, ok := next.Table(t.Table); !ok {
			out = append(out, t.Table)
		}
	}
	slices.Sort(out)
	return out
}

// LayoutMismatch names where a stored layout first differs from the
// running one: a table, and the column when one applies.
type LayoutMismatch struct {
	Table  string
	Column string
}

// StoredLayoutMismatch compares the layout stored in a database with the
// running layout when both have the same schema version, which must then
// agree exactly ("Same-version storage readiness", §2.4). It reports the
// first difference in running table order (the column of the running
// layout where both have one), then the first stored table the running
// layout lacks, with no column.
func StoredLayoutMismatch(stored, running Layout) (LayoutMismatch, bool) {
	for _, t := range running {
		before, _ := stored.Table(t.Table)
		for i := range max(len(t.Columns), len(before)) {
			switch {
			case i < len(t.Columns) && i < len(before) && t.Columns[i] == before[i]:
				continue
			case i < len(t.Columns):
				return LayoutMismatch{Table: t.Table, Column: t.Columns[i].Name}, true
			default:
				return LayoutMismatch{Table: t.Table, Column: before[i].Name}, true
			}
		}
	}
	for _, t := range stored {
		if _, ok := running.Table(t.Table); !ok {
			return LayoutMismatch{Table: t.Table}, true
		}
	}
	return LayoutMismatch{}, false
}
