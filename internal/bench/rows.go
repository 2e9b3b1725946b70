package bench

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// rowGen makes the rows of the benchmarked table from the schema: a
// unique primary key, the run's scope value in the scope column, and a
// small value of its type in every other column (a string padded to
// valueBytes when that is positive).
type rowGen struct {
	table      *schema.CompiledTable
	variable   string // the scope variable subscribed by
	scopeCol   int
	valueBytes int
}

// newRowGen picks the table: the named one, or the first table whose
// first scope column is not its primary key (a scope holds many rows).
func newRowGen(s *schema.Compiled, name string, valueBytes int) (*rowGen, error) {
	var t *schema.CompiledTable
	if name != "" {
		var ok bool
		if t, ok = s.Table(name); !ok {
			return nil, fmt.Errorf("the schema has no table %q", name)
		}
	} else {
		for _, c := range s.Tables() {
			if sc := c.Scopes(); len(sc) > 0 && sc[0].ColumnIndex != c.PrimaryKey() {
				t = c
				break
			}
		}
		if t == nil {
			return nil, fmt.Errorf("the schema has no table with a scope column besides its primary key; name one with -table")
		}
	}
	if len(t.Scopes()) == 0 {
		return nil, fmt.Errorf("table %s has no scope", t.Name())
	}
	sc := t.Scopes()[0]
	if ty := t.Columns()[sc.ColumnIndex].Type; ty != wire.TypeString {
		return nil, fmt.Errorf("table %s: the scope column %s is not a string column", t.Name(), sc.Column)
	}
	for i, c := range t.Columns() {
		if (c.Type == wire.TypeBlobRef || c.Type == wire.TypeCRDT) && !c.Nullable && i != sc.ColumnIndex {
			return nil, fmt.Errorf("table %s: cannot generate values of the %s column %s", t.Name(), c.Type, c.Name)
		}
	}
	return &rowGen{table: t, variable: sc.Pattern.Variable, scopeCol: sc.ColumnIndex, valueBytes: valueBytes}, nil
}

// row returns row k of a writer: its key is unique per (prefix, k).
func (g *rowGen) row(prefix string, k int, scope string) []wire.Value {
	cols := g.table.Columns()
	vals := make([]wire.Value, len(cols))
	pk := g.table.PrimaryKey()
	for i, c := range cols {
		switch {
		case i == pk:
			vals[i] = g.key(c.Type, prefix, k)
		case i == g.scopeCol:
			vals[i] = wire.Value{Str: scope}
		default:
			vals[i] = sample(c, k)
			if c.Type == wire.TypeString && !vals[i].Null && len(vals[i].Str) < g.valueBytes {
				vals[i].Str += strings.Repeat("x", g.valueBytes-len(vals[i].Str))
			}
		}
	}
	return vals
}

func (g *rowGen) key(t wire.ColumnType, prefix string, k int) wire.Value {
	if t == wire.TypeInteger {
		h := fnv.New32a()
		_, _ = h.Write([]byte(prefix))
		return wire.Value{Int: int64(h.Sum32()&0x7fffffff)<<24 | int64(k)}
	}
	return wire.Value{Str: prefix + "-" + strconv.Itoa(k)}
}

// sample is a small value of a column's type.
func sample(c schema.Column, k int) wire.Value {
	switch c.Type {
	case wire.TypeString:
		return wire.Value{Str: "row " + strconv.Itoa(k)}
	case wire.TypeInteger:
		return wire.Value{Int: int64(k)}
	case wire.TypeFloat:
		return wire.Value{Float: float64(k) + 0.5}
	case wire.TypeBoolean:
		return wire.Value{Bool: k%2 == 0}
	case wire.TypeJSON:
		return wire.Value{Str: `{"k":` + strconv.Itoa(k) + `}`}
	case wire.TypeBytes:
		return wire.Value{Bytes: []byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}}
	}
	return wire.Value{Null: true}
}
