package store

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// Authoritative queries (§6.7, §6.8): a small, typed, read-only query over
// the current rows of one table of the running schema, run inside a push
// transaction on its own connection, so that it sees every write the
// transaction staged and waits for no other connection. A query names only
// what the compiled schema declares (its table and columns); its values are
// bound as parameters, never written into SQL text. Every query reads the
// transaction's partition only.

// CodeInvalidQuery is the storage code of a query the schema cannot answer:
// an unknown table or column, a table whose typed columns are not stored
// (not materialized), a value of the wrong type, an operator the column's
// type does not support, or a bound out of range.
const CodeInvalidQuery = "sync.storage.invalid_query"

// Query bounds.
const (
	// DefaultQueryLimit is the row limit of a query that sets none.
	DefaultQueryLimit = 100
	// MaxQueryLimit is the largest row limit.
	MaxQueryLimit = 1000
	// MaxQueryFilters bounds the filters of a query, MaxQueryOrder its
	// ordering columns and MaxQueryValues the values of one In filter.
	MaxQueryFilters = 32
	MaxQueryOrder   = 8
	MaxQueryValues  = 1000
)

// FilterOp is the comparison of a Filter.
type FilterOp uint8

// Filter operators. The comparisons (Eq to In) never match a NULL value,
// as in SQL; IsNull and NotNull test for it.
const (
	OpEq FilterOp = iota + 1
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe
	OpIn
	OpIsNull
	OpNotNull
)

var filterOpNames = [...]string{OpEq: "eq", OpNe: "ne", OpLt: "lt", OpLe: "le", OpGt: "gt", OpGe: "ge",
	OpIn: "in", OpIsNull: "is null", OpNotNull: "not null"}

func (op FilterOp) String() string {
	if int(op) < len(filterOpNames) && filterOpNames[op] != "" {
		return filterOpNames[op]
	}
	return fmt.Sprintf("FilterOp(%d)", uint8(op))
}

// Filter is one condition on a column; a row matches a query when it
// matches every filter.
//
// Values are Go values of the column's type: string for string, json and
// blob_ref columns; int64 (or any Go integer that fits) for integer;
// float64 (or an integer) for float; bool for boolean; []byte for bytes.
// Lt, Le, Gt and Ge compare strings bytewise (UTF-8), numbers numerically
// and booleans false before true; they do not apply to bytes. Json and crdt
// columns take only IsNull and NotNull.
type Filter struct {
	Column string
	Op     FilterOp
	// Value is the operand of Eq, Ne, Lt, Le, Gt and Ge.
	Value any
	// Values are the operands of In (an empty list matches nothing).
	Values []any
}

// Eq matches rows whose column equals v.
func Eq(column string, v any) Filter { return Filter{Column: column, Op: OpEq, Value: v} }

// Ne matches rows whose column is not NULL and differs from v.
func Ne(column string, v any) Filter { return Filter{Column: column, Op: OpNe, Value: v} }

// Lt matches rows whose column is less than v.
func Lt(column string, v any) Filter { return Filter{Column: column, Op: OpLt, Value: v} }

// Le matches rows whose column is at most v.
func Le(column string, v any) Filter { return Filter{Column: column, Op: OpLe, Value: v} }

// Gt matches rows whose column is greater than v.
func Gt(column string, v any) Filter { return Filter{Column: column, Op: OpGt, Value: v} }

// Ge matches rows whose column is at least v.
func Ge(column string, v any) Filter { return Filter{Column: column, Op: OpGe, Value: v} }

// In matches rows whose column equals one of vs.
func In(column string, vs ...any) Filter { return Filter{Column: column, Op: OpIn, Values: vs} }

// IsNull matches rows whose column is NULL.
func IsNull(column string) Filter { return Filter{Column: column, Op: OpIsNull} }

// NotNull matches rows whose column is not NULL.
func NotNull(column string) Filter { return Filter{Column: column, Op: OpNotNull} }

// Order is one ordering column. NULLs sort first ascending and last
// descending; rows that tie on every ordering column come in bytewise row
// id order.
type Order struct {
	Column string
	Desc   bool
}

// Asc orders by column, ascending.
func Asc(column string) Order { return Order{Column: column} }

// Desc orders by column, descending.
func Desc(column string) Order { return Order{Column: column, Desc: true} }

// Query selects current rows of one table in the transaction's partition.
type Query struct {
	Table   string
	Where   []Filter
	OrderBy []Order
	// Limit bounds the rows returned, and a count (a count of at most
	// Limit rows is all an "at most N" rule needs). Zero means
	// DefaultQueryLimit for rows and no bound for a count; at most
	// MaxQueryLimit.
	Limit int
}

// AggregateKind is what a query returns.
type AggregateKind uint8

// Aggregate kinds.
const (
	// AggRows returns the matching rows (at most the limit), ordered.
	AggRows AggregateKind = iota
	// AggCount counts the matching rows (at most the limit, when set).
	AggCount
	// AggSum sums an integer or float column over the matching rows
	// (NULLs are skipped; no row sums to 0).
	AggSum
	// AggExists reports whether a row matches.
	AggExists
)

// Aggregate selects what a query returns; Column names the summed column
// of AggSum.
type Aggregate struct {
	Kind   AggregateKind
	Column string
}

// QueryResult is the answer to a query: Rows for AggRows, Count for
// AggCount, Sum for AggSum (Int for an integer column, Float for a float
// column), Exists for AggExists.
type QueryResult struct {
	Rows   []Row
	Count  int64
	Sum    wire.Value
	Exists bool
}

// QueryTx is implemented by the WriteTx of drivers that run authoritative
// queries: both sqlitestore and pgstore. Query runs on the transaction's
// own connection, sees the transaction's staged writes, and reads only its
// partition. A query the schema cannot answer fails with an *Error of code
// CodeInvalidQuery before any statement is sent (the transaction is left
// as it was).
type QueryTx interface {
	Query(ctx context.Context, q Query, agg Aggregate) (QueryResult, error)
}

// QueryPlan is a query checked against the compiled schema: every column
// resolved to its declaration and every value converted to the column's
// wire type. Drivers build their statement from it.
type QueryPlan struct {
	Table   *schema.CompiledTable
	Filters []PlannedFilter
	Order   []PlannedOrder
	// Limit is the row bound: positive for rows, 0 (none) or positive for
	// a count, 1 for exists.
	Limit int
	Kind  AggregateKind
	// Sum is the summed column of AggSum.
	Sum PlannedColumn
}

// PlannedColumn is a resolved column.
type PlannedColumn struct {
	Name  string
	Index int
	Type  wire.ColumnType
}

// PlannedFilter is a checked filter; Values holds the one operand of a
// comparison, the list of In, nothing for IsNull and NotNull.
type PlannedFilter struct {
	Column PlannedColumn
	Op     FilterOp
	Values []wire.Value
}

// PlannedOrder is a checked ordering column.
type PlannedOrder struct {
	Column PlannedColumn
	Desc   bool
}

// PlanQuery checks q (with agg) against the table of the running schema.
func PlanQuery(sc *schema.Compiled, q Query, agg Aggregate) (*QueryPlan, error) {
	if sc == nil {
		return nil, ErrNoSchema
	}
	t, ok := sc.Table(q.Table)
	if !ok {
		return nil, invalidQuery("unknown_table", q.Table, "")
	}
	if !t.Materialize() {
		return nil, invalidQuery("not_materialized", q.Table, "")
	}
	if len(q.Where) > MaxQueryFilters || len(q.OrderBy) > MaxQueryOrder {
		return nil, invalidQuery("too_many_terms", q.Table, "")
	}
	p := &QueryPlan{Table: t, Kind: agg.Kind}
	switch {
	case q.Limit < 0 || q.Limit > MaxQueryLimit:
		return nil, invalidQuery("limit_out_of_range", q.Table, "")
	case agg.Kind == AggRows && q.Limit == 0:
		p.Limit = DefaultQueryLimit
	case agg.Kind == AggExists:
		p.Limit = 1
	default:
		p.Limit = q.Limit
	}
	for _, f := range q.Where {
		pf, err := planFilter(t, f)
		if err != nil {
			return nil, err
		}
		p.Filters = append(p.Filters, pf)
	}
	switch agg.Kind {
	case AggRows:
		for _, o := range q.OrderBy {
			c, err := column(t, o.Column)
			if err != nil {
				return nil, err
			}
			if c.Type == wire.TypeJSON || c.Type == wire.TypeCRDT {
				return nil, invalidQuery("unordered_type", q.Table, o.Column)
			}
			p.Order = append(p.Order, PlannedOrder{Column: c, Desc: o.Desc})
		}
	case AggCount, AggExists:
		if len(q.OrderBy) > 0 {
			return nil, invalidQuery("order_without_rows", q.Table, "")
		}
	case AggSum:
		if len(q.OrderBy) > 0 {
			return nil, invalidQuery("order_without_rows", q.Table, "")
		}
		if q.Limit != 0 {
			return nil, invalidQuery("limit_on_sum", q.Table, "")
		}
		c, err := column(t, agg.Column)
		if err != nil {
			return nil, err
		}
		if c.Type != wire.TypeInteger && c.Type != wire.TypeFloat {
			return nil, invalidQuery("sum_of_non_number", q.Table, agg.Column)
		}
		p.Sum = c
	default:
		return nil, invalidQuery("unknown_aggregate", q.Table, "")
	}
	return p, nil
}

func column(t *schema.CompiledTable, name string) (PlannedColumn, error) {
	i, ok := t.ColumnIndex(name)
	if !ok {
		return PlannedColumn{}, invalidQuery("unknown_column", t.Name(), name)
	}
	return PlannedColumn{Name: name, Index: i, Type: t.Columns()[i].Type}, nil
}

func planFilter(t *schema.CompiledTable, f Filter) (PlannedFilter, error) {
	c, err := column(t, f.Column)
	if err != nil {
		return PlannedFilter{}, err
	}
	pf := PlannedFilter{Column: c, Op: f.Op}
	bad := func(reason string) (PlannedFilter, error) {
		return PlannedFilter{}, invalidQuery(reason, t.Name(), f.Column)
	}
	switch f.Op {
	case OpIsNull, OpNotNull:
		if f.Value != nil || f.Values != nil {
			return bad("operand_not_allowed")
		}
		return pf, nil
	case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe, OpIn:
	default:
		return bad("unknown_operator")
	}
	switch c.Type {
	case wire.TypeJSON, wire.TypeCRDT:
		return bad("operator_not_supported")
	case wire.TypeBytes:
		if f.Op != OpEq && f.Op != OpNe && f.Op != OpIn {
			return bad("operator_not_supported")
		}
	}
	if f.Op == OpIn {
		if f.Value != nil {
			return bad("operand_not_allowed")
		}
		if len(f.Values) > MaxQueryValues {
			return bad("too_many_values")
		}
		pf.Values = make([]wire.Value, len(f.Values))
		for i, v := range f.Values {
			if pf.Values[i], err = QueryValue(c.Type, v); err != nil {
				return bad("value_type")
			}
		}
		return pf, nil
	}
	if f.Values != nil {
		return bad("operand_not_allowed")
	}
	v, err := QueryValue(c.Type, f.Value)
	if err != nil {
		return bad("value_type")
	}
	pf.Values = []wire.Value{v}
	return pf, nil
}

// QueryValue converts a Go value to a non-NULL value of a column type for
// a comparison: strings for string, json and blob_ref; any Go integer that
// fits in int64 for integer; float64, float32 or an integer for float
// (never NaN); bool for boolean; []byte for bytes. A string must be
// well-formed UTF-8 without NUL characters (what both drivers store as
// text).
func QueryValue(t wire.ColumnType, v any) (wire.Value, error) {
	fail := func() (wire.Value, error) {
		return wire.Value{}, fmt.Errorf("a %T does not compare with a %s column", v, t)
	}
	switch t {
	case wire.TypeString, wire.TypeJSON, wire.TypeBlobRef:
		s, ok := v.(string)
		if !ok || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return fail()
		}
		return wire.Value{Str: s}, nil
	case wire.TypeInteger:
		if n, ok := wire.Int64Of(v); ok {
			return wire.Value{Int: n}, nil
		}
	case wire.TypeFloat:
		switch x := v.(type) {
		case float64:
			if !math.IsNaN(x) {
				return wire.Value{Float: x}, nil
			}
		case float32:
			if !math.IsNaN(float64(x)) {
				return wire.Value{Float: float64(x)}, nil
			}
		default:
			if n, ok := wire.Int64Of(v); ok {
				return wire.Value{Float: float64(n)}, nil
			}
		}
	case wire.TypeBoolean:
		if b, ok := v.(bool); ok {
			return wire.Value{Bool: b}, nil
		}
	case wire.TypeBytes:
		if b, ok := v.([]byte); ok {
			return wire.Value{Bytes: b}, nil
		}
	}
	return fail()
}

func invalidQuery(reason, table, column string) *Error {
	d := map[string]any{"reason": reason, "table": table}
	if column != "" {
		d["column"] = column
	}
	return &Error{Code: CodeInvalidQuery, Message: "the query cannot be answered from the schema", Details: d}
}
