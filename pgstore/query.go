package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

var _ store.QueryTx = (*writeTx)(nil)

// Query runs an authoritative query (store.QueryTx) on the write's own
// connection and transaction, after the statements it deferred, so it sees
// every write staged before it, under the partition lock the write holds.
// Identifiers come from the compiled schema, values are bound with their
// column's type; strings compare and sort bytewise (COLLATE "C"), as on
// SQLite.
func (t *writeTx) Query(ctx context.Context, q store.Query, agg store.Aggregate) (store.QueryResult, error) {
	if t.st == nil {
		return store.QueryResult{}, store.ErrNoSchema
	}
	p, err := store.PlanQuery(t.st.compiled, q, agg)
	if err != nil {
		return store.QueryResult{}, err
	}
	ts, err := t.table(q.Table)
	if err != nil {
		return store.QueryResult{}, err
	}
	var where strings.Builder
	args := []any{t.partition}
	param := func(v any, cast string) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args)) + "::" + cast
	}
	where.WriteString(" FROM " + ts.quoted + " WHERE " + quoteIdent(colPartition) + " = $1")
	for _, f := range p.Filters {
		col := quoteIdent(f.Column.Name)
		switch f.Op {
		case store.OpIsNull:
			where.WriteString(" AND " + col + " IS NULL")
		case store.OpNotNull:
			where.WriteString(" AND " + col + " IS NOT NULL")
		case store.OpIn:
			where.WriteString(" AND " + col + " = ANY(" + param(pgArray(f.Column.Type, f.Values), pgCast(f.Column.Type)+"[]") + ")")
		default:
			if isText(f.Column.Type) && f.Op != store.OpEq && f.Op != store.OpNe {
				col += ` COLLATE "C"`
			}
			where.WriteString(" AND " + col + " " + pgComparison[f.Op] + " " +
				param(projectValue(f.Column.Type, f.Values[0]), pgCast(f.Column.Type)))
		}
	}
	var sql string
	switch p.Kind {
	case store.AggCount:
		sql = "SELECT count(*)" + where.String()
		if p.Limit > 0 {
			sql = "SELECT count(*) FROM (SELECT 1" + where.String() + " LIMIT " + param(p.Limit, "bigint") + ") s"
		}
	case store.AggExists:
		sql = "SELECT EXISTS (SELECT 1" + where.String() + ")"
	case store.AggSum:
		cast := "bigint"
		if p.Sum.Type == wire.TypeFloat {
			cast = "double precision"
		}
		sql = "SELECT coalesce(sum(" + quoteIdent(p.Sum.Name) + "), 0)::" + cast + where.String()
	default:
		var order strings.Builder
		for _, o := range p.Order {
			order.WriteString(quoteIdent(o.Column.Name))
			if isText(o.Column.Type) {
				order.WriteString(` COLLATE "C"`)
			}
			if o.Desc {
				order.WriteString(" DESC NULLS LAST, ")
			} else {
				order.WriteString(" ASC NULLS FIRST, ")
			}
		}
		sql = "SELECT " + rowColumns + where.String() + " ORDER BY " + order.String() +
			quoteIdent(colRowID) + ` COLLATE "C" LIMIT ` + param(p.Limit, "bigint")
	}
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(sql, args...) })
	if err != nil {
		return store.QueryResult{}, fmt.Errorf("query %s: %w", q.Table, err)
	}
	var res store.QueryResult
	switch p.Kind {
	case store.AggCount:
		err = br.QueryRow().Scan(&res.Count)
	case store.AggExists:
		err = br.QueryRow().Scan(&res.Exists)
	case store.AggSum:
		if p.Sum.Type == wire.TypeFloat {
			err = br.QueryRow().Scan(&res.Sum.Float)
		} else {
			err = br.QueryRow().Scan(&res.Sum.Int)
		}
	default:
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			res.Rows, err = collectRows(rows, q.Table)
		}
	}
	if err = closeBatch(br, err); err != nil {
		return store.QueryResult{}, fmt.Errorf("query %s: %w", q.Table, err)
	}
	return res, nil
}

var pgComparison = map[store.FilterOp]string{
	store.OpEq: "=", store.OpNe: "<>", store.OpLt: "<", store.OpLe: "<=", store.OpGt: ">", store.OpGe: ">=",
}

func isText(t wire.ColumnType) bool { return t == wire.TypeString || t == wire.TypeBlobRef }

// pgCast is the type a bound operand is cast to: the column's.
func pgCast(t wire.ColumnType) string {
	switch t {
	case wire.TypeInteger:
		return "bigint"
	case wire.TypeFloat:
		return "double precision"
	case wire.TypeBoolean:
		return "boolean"
	case wire.TypeBytes:
		return "bytea"
	}
	return "text"
}

// pgArray is the bound array of In operands.
func pgArray(t wire.ColumnType, vals []wire.Value) any {
	switch t {
	case wire.TypeInteger:
		out := make([]int64, len(vals))
		for i, v := range vals {
			out[i] = v.Int
		}
		return out
	case wire.TypeFloat:
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = v.Float
		}
		return out
	case wire.TypeBoolean:
		out := make([]bool, len(vals))
		for i, v := range vals {
			out[i] = v.Bool
		}
		return out
	case wire.TypeBytes:
		out := make([][]byte, len(vals))
		for i, v := range vals {
			out[i] = nonNilBytes(v.Bytes)
		}
		return out
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v.Str
	}
	return out
}
