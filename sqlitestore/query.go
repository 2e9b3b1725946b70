package sqlitestore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

var _ store.QueryTx = (*writeTx)(nil)

// Query runs an authoritative query (store.QueryTx) on the writer's
// connection, inside the write's savepoint: it sees the writes staged
// before it. Identifiers come from the compiled schema, values are bound;
// an In list is bound as one JSON array, so the statement text depends on
// the query's shape only and the connection's statement cache stays
// bounded by the shapes a host's code writes.
func (tx *writeTx) Query(ctx context.Context, q store.Query, agg store.Aggregate) (store.QueryResult, error) {
	if err := ctx.Err(); err != nil {
		return store.QueryResult{}, err
	}
	if tx.cs == nil {
		return store.QueryResult{}, store.ErrNoSchema
	}
	p, err := store.PlanQuery(tx.cs.schema, q, agg)
	if err != nil {
		return store.QueryResult{}, err
	}
	t, err := tx.table(q.Table)
	if err != nil {
		return store.QueryResult{}, err
	}
	var where strings.Builder
	args := []any{tx.partition}
	where.WriteString(" FROM " + t.name + " WHERE _sync_partition=?")
	for _, f := range p.Filters {
		col := quoteIdent(f.Column.Name)
		switch f.Op {
		case store.OpIsNull:
			where.WriteString(" AND " + col + " IS NULL")
			continue
		case store.OpNotNull:
			where.WriteString(" AND " + col + " IS NOT NULL")
			continue
		case store.OpIn:
			list, err := inOperands(f.Column.Type, f.Values)
			if err != nil {
				return store.QueryResult{}, err
			}
			elem := "value"
			if f.Column.Type == wire.TypeBytes {
				elem = "unhex(value)"
			}
			where.WriteString(" AND " + col + " IN (SELECT " + elem + " FROM json_each(?))")
			args = append(args, list)
			continue
		}
		where.WriteString(" AND " + col + sqlComparison[f.Op] + "?")
		args = append(args, sqlValue(f.Column.Type, f.Values[0]))
	}
	var res store.QueryResult
	switch p.Kind {
	case store.AggCount:
		sql := "SELECT count(*)" + where.String()
		if p.Limit > 0 {
			sql = "SELECT count(*) FROM (SELECT 1" + where.String() + " LIMIT ?)"
			args = append(args, p.Limit)
		}
		err = tx.c.queryRow(sql, args...).Scan(&res.Count)
	case store.AggExists:
		var n int64
		err = tx.c.queryRow("SELECT EXISTS (SELECT 1"+where.String()+")", args...).Scan(&n)
		res.Exists = n != 0
	case store.AggSum:
		col := quoteIdent(p.Sum.Name)
		if p.Sum.Type == wire.TypeFloat {
			err = tx.c.queryRow("SELECT total("+col+")"+where.String(), args...).Scan(&res.Sum.Float)
		} else {
			err = tx.c.queryRow("SELECT coalesce(sum("+col+"), 0)"+where.String(), args...).Scan(&res.Sum.Int)
		}
	default:
		res.Rows, err = tx.queryRows(t, p, where.String(), args)
	}
	if err != nil {
		return store.QueryResult{}, fmt.Errorf("query %s: %w", q.Table, err)
	}
	return res, nil
}

var sqlComparison = map[store.FilterOp]string{
	store.OpEq: "=", store.OpNe: "<>", store.OpLt: "<", store.OpLe: "<=", store.OpGt: ">", store.OpGe: ">=",
}

func (tx *writeTx) queryRows(t *tableSQL, p *store.QueryPlan, where string, args []any) ([]store.Row, error) {
	var order strings.Builder
	order.WriteString(" ORDER BY ")
	for _, o := range p.Order {
		order.WriteString(quoteIdent(o.Column.Name))
		if o.Desc {
			order.WriteString(" DESC NULLS LAST, ")
		} else {
			order.WriteString(" ASC NULLS FIRST, ")
		}
	}
	order.WriteString("_sync_row_id LIMIT ?")
	args = append(args, p.Limit)
	rows, err := tx.c.query("SELECT "+t.scanCols+where+order.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Row
	for rows.Next() {
		r := store.Row{Table: t.t.Name()}
		var scopes []byte
		if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
			return nil, err
		}
		if r.Scopes, err = store.DecodeScopes(scopes); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// inOperands encodes In operands as the JSON array json_each reads back as
// the column's stored values: strings, integers, reals, booleans as 0 and
// 1, bytes as hex (unhexed in the statement).
func inOperands(t wire.ColumnType, vals []wire.Value) (string, error) {
	list := make([]any, len(vals))
	for i, v := range vals {
		switch t {
		case wire.TypeBytes:
			list[i] = hex.EncodeToString(v.Bytes)
		default:
			list[i] = sqlValue(t, v)
		}
	}
	b, err := json.Marshal(list)
	return string(b), err
}
