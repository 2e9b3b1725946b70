package schema

import (
	"fmt"
	"slices"
)

// references checks the table's own side of its declared references: the
// column exists and carries one reference, and onDelete is valid.
func (tc *tableCompiler) references() {
	for _, r := range tc.table.References {
		i, ok := tc.out.columnIndex[r.Column]
		if !ok {
			tc.addf("reference column %q is not a column", r.Column)
			continue
		}
		onDelete := r.OnDelete
		switch onDelete {
		case "":
			onDelete = OnDeleteRestrict
		case OnDeleteRestrict, OnDeleteCascade, OnDeleteSetNull:
		default:
			tc.addf("reference column %q: unknown onDelete %q (use RESTRICT, CASCADE or SET NULL)", r.Column, r.OnDelete)
			continue
		}
		if slices.ContainsFunc(tc.out.references, func(prev CompiledReference) bool { return prev.Column == r.Column }) {
			tc.addf("column %q declares more than one reference", r.Column)
			continue
		}
		tc.out.references = append(tc.out.references, CompiledReference{
			Column:      r.Column,
			ColumnIndex: i,
			ParentTable: r.ParentTable,
			OnDelete:    onDelete,
		})
	}
}

// resolveReferences checks every reference against its parent table (§6.11)
// and records it as an incoming reference of the parent. The rules keep a
// cascade inside one authorization boundary and let the server reach the
// children of a parent through an index.
func resolveReferences(c *Compiled) []error {
	var errs []error
	for _, child := range c.tables {
		addf := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("table %q: %s", child.name, fmt.Sprintf(format, args...)))
		}
		for _, r := range child.references {
			parent, ok := c.byName[r.ParentTable]
			if !ok {
				addf("reference column %q names unknown table %q", r.Column, r.ParentTable)
				continue
			}
			col := child.columns[r.ColumnIndex]
			if parent.primaryKey >= 0 {
				key := parent.columns[parent.primaryKey]
				if col.Type != key.Type {
					addf("reference column %q has type %s but %s.%s has type %s; the types must match (§6.11)",
						r.Column, col.Type, parent.name, key.Name, key.Type)
				}
			}
			if r.OnDelete == OnDeleteSetNull && !col.Nullable {
				addf("reference column %q is not nullable but declares ON DELETE SET NULL (§6.11)", r.Column)
			}
			if !slices.Equal(child.patterns, parent.patterns) {
				addf("reference column %q targets %q, whose scope patterns differ; a cascade must not cross an authorization boundary (§6.11)",
					r.Column, parent.name)
			}
			index := slices.IndexFunc(child.indexes, func(ix CompiledIndex) bool {
				return len(ix.Columns) == 1 && ix.Columns[0] == r.Column
			})
			if index < 0 {
				addf("reference column %q needs a declared single-column index so the server can find the children of a parent (§6.11)", r.Column)
				continue
			}
			parent.referencedBy = append(parent.referencedBy, IncomingReference{
				Table:       child.name,
				Column:      r.Column,
				ColumnIndex: r.ColumnIndex,
				OnDelete:    r.OnDelete,
				Index:       child.indexes[index].Name,
			})
		}
	}
	return errs
}
