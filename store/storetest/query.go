package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunQuery tests authoritative queries (store.QueryTx): filters, order,
// limits and aggregates over the rows of a transaction, its staged writes
// included, one partition only, and the refusal of what the schema cannot
// answer. A driver whose WriteTx is not a store.QueryTx skips it.
func RunQuery(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"FiltersAndOrder", testQueryFiltersAndOrder},
		{"Aggregates", testQueryAggregates},
		{"SeesStagedWritesOfItsPartition", testQueryStaged},
		{"Refusals", testQueryRefusals},
	})
}

// The query fixture: items of every comparable type, and a table whose
// typed columns are not stored.
const (
	tableItems  = "items"
	tableSealed = "sealed"
)

var querySchema = sync.OnceValues(func() (*schema.Compiled, error) {
	return schema.New(1).
		Table(tableItems, "id", schema.String("id"), schema.String(VarProject), schema.String("title").Null(),
			schema.Integer("n").Null(), schema.Float("f").Null(), schema.Boolean("done").Null(),
			schema.Bytes("blob").Null(), schema.JSON("doc").Null()).
		Scope("project:{project_id}").
		Table(tableSealed, "id", schema.String("id"), schema.String(VarProject), schema.String("body").Null()).
		Scope("project:{project_id}").Materialize(false).
		Compile()
})

type item struct {
	id, project string
	title       *string
	n           *int64
	f           *float64
	done        *bool
	blob        []byte
}

func (it item) values() []wire.Value {
	v := []wire.Value{{Str: it.id}, {Str: it.project}, {Null: true}, {Null: true}, {Null: true}, {Null: true}, {Null: true}, {Null: true}}
	if it.title != nil {
		v[2] = wire.Value{Str: *it.title}
	}
	if it.n != nil {
		v[3] = wire.Value{Int: *it.n}
	}
	if it.f != nil {
		v[4] = wire.Value{Float: *it.f}
	}
	if it.done != nil {
		v[5] = wire.Value{Bool: *it.done}
	}
	if it.blob != nil {
		v[6] = wire.Value{Bytes: it.blob}
	}
	return v
}

// queryEnv is a store with the query fixture ensured.
type queryEnv struct {
	t  *testing.T
	s  store.Store
	sc *schema.Compiled
}

func newQueryEnv(t *testing.T, open Opener) *queryEnv {
	t.Helper()
	sc, err := querySchema()
	if err != nil {
		t.Fatal(err)
	}
	e := &queryEnv{t: t, s: open(t), sc: sc}
	if err := e.s.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatalf("EnsureSchema: %v", err)
	}
	for _, p := range []string{"p", "other"} {
		if _, err := e.s.TouchPartition(t.Context(), p, 1000, epochOf(p)); err != nil {
			t.Fatal(err)
		}
	}
	e.inTx("p", func(ctx context.Context, tx store.WriteTx) {
		if _, ok := tx.(store.QueryTx); !ok {
			t.Skip("the driver's WriteTx is not a store.QueryTx")
		}
	})
	return e
}

// put writes items in one Write.
func (e *queryEnv) put(partition string, items ...item) {
	e.t.Helper()
	e.inTx(partition, func(ctx context.Context, tx store.WriteTx) {
		for _, it := range items {
			if err := tx.UpsertRow(ctx, NewRowWrite(e.t, e.sc, tableItems, it.values(), 1)); err != nil {
				e.t.Fatal(err)
			}
		}
	})
}

// inTx runs fn inside a Write of the partition that commits.
func (e *queryEnv) inTx(partition string, fn func(ctx context.Context, tx store.WriteTx)) {
	e.t.Helper()
	if err := e.s.Write(e.t.Context(), partition, func(ctx context.Context, tx store.WriteTx) error {
		fn(ctx, tx)
		return nil
	}); err != nil {
		e.t.Fatalf("Write: %v", err)
	}
}

// query runs one query in its own Write of partition "p".
func (e *queryEnv) query(q store.Query, agg store.Aggregate) (store.QueryResult, error) {
	var res store.QueryResult
	var qerr error
	e.inTx("p", func(ctx context.Context, tx store.WriteTx) {
		res, qerr = tx.(store.QueryTx).Query(ctx, q, agg)
	})
	return res, qerr
}

func (e *queryEnv) ids(q store.Query) []string {
	e.t.Helper()
	res, err := e.query(q, store.Aggregate{})
	if err != nil {
		e.t.Fatalf("query %+v: %v", q, err)
	}
	out := []string{}
	for _, r := range res.Rows {
		out = append(out, r.RowID)
	}
	return out
}

func testQueryFiltersAndOrder(t *testing.T, open Opener) {
	e := newQueryEnv(t, open)
	e.put("p",
		item{id: "a", project: "p1", title: ptr("b"), n: ptr[int64](3), f: ptr(1.5), done: ptr(true), blob: []byte{1}},
		item{id: "b", project: "p1", title: ptr("a"), n: ptr[int64](1), f: ptr(-2.0), done: ptr(false), blob: []byte{2}},
		item{id: "c", project: "p2", title: ptr("B"), n: ptr[int64](2), done: ptr(false)},
		item{id: "d", project: "p2", n: ptr[int64](3)},
		item{id: "é", project: "p1", title: ptr("é"), n: ptr[int64](-7)},
	)
	e.put("other", item{id: "x", project: "p1", title: ptr("a"), n: ptr[int64](1)})
	tests := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"all, by row id", store.Query{Table: tableItems}, []string{"a", "b", "c", "d", "é"}},
		{"eq string", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("project_id", "p1")}}, []string{"a", "b", "é"}},
		{"ne skips null", store.Query{Table: tableItems, Where: []store.Filter{store.Ne("title", "a")}}, []string{"a", "c", "é"}},
		{"lt integer", store.Query{Table: tableItems, Where: []store.Filter{store.Lt("n", 3)}}, []string{"b", "c", "é"}},
		{"le ge", store.Query{Table: tableItems, Where: []store.Filter{store.Ge("n", 2), store.Le("n", int32(3))}}, []string{"a", "c", "d"}},
		{"gt float with an integer operand", store.Query{Table: tableItems, Where: []store.Filter{store.Gt("f", 0)}}, []string{"a"}},
		{"gt string bytewise", store.Query{Table: tableItems, Where: []store.Filter{store.Gt("title", "a")}}, []string{"a", "é"}},
		{"eq bool", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("done", false)}}, []string{"b", "c"}},
		{"eq bytes", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("blob", []byte{2})}}, []string{"b"}},
		{"in strings", store.Query{Table: tableItems, Where: []store.Filter{store.In("title", "a", "é", "zz")}}, []string{"b", "é"}},
		{"in integers", store.Query{Table: tableItems, Where: []store.Filter{store.In("n", int64(1), 2)}}, []string{"b", "c"}},
		{"in bools", store.Query{Table: tableItems, Where: []store.Filter{store.In("done", true)}}, []string{"a"}},
		{"in bytes", store.Query{Table: tableItems, Where: []store.Filter{store.In("blob", []byte{1}, []byte{9})}}, []string{"a"}},
		{"in floats", store.Query{Table: tableItems, Where: []store.Filter{store.In("f", -2.0, 7)}}, []string{"b"}},
		{"empty in matches nothing", store.Query{Table: tableItems, Where: []store.Filter{store.In("n")}}, []string{}},
		{"is null", store.Query{Table: tableItems, Where: []store.Filter{store.IsNull("title")}}, []string{"d"}},
		{"not null json", store.Query{Table: tableItems, Where: []store.Filter{store.NotNull("doc")}}, []string{}},
		{"order desc, ties by row id", store.Query{Table: tableItems, OrderBy: []store.Order{store.Desc("n")}}, []string{"a", "d", "c", "b", "é"}},
		{"order asc nulls first", store.Query{Table: tableItems, OrderBy: []store.Order{store.Asc("title")}}, []string{"d", "c", "b", "a", "é"}},
		{"order desc nulls last", store.Query{Table: tableItems, OrderBy: []store.Order{store.Desc("f")}}, []string{"a", "b", "c", "d", "é"}},
		{"two order columns and a limit", store.Query{Table: tableItems, OrderBy: []store.Order{store.Asc("project_id"), store.Desc("title")}, Limit: 3}, []string{"é", "a", "b"}},
	}
	for _, tt := range tests {
		if got := e.ids(tt.q); !slices.Equal(got, tt.want) {
			t.Errorf("%s: rows %q, want %q", tt.name, got, tt.want)
		}
	}
	// A row comes back whole: payload, version, scopes.
	res, err := e.query(store.Query{Table: tableItems, Where: []store.Filter{store.Eq("id", "a")}}, store.Aggregate{})
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("row a: %v, %d rows", err, len(res.Rows))
	}
	want := NewRowWrite(t, e.sc, tableItems, item{id: "a", project: "p1", title: ptr("b"), n: ptr[int64](3), f: ptr(1.5), done: ptr(true), blob: []byte{1}}.values(), 1)
	if got := res.Rows[0]; !slices.Equal(got.Payload, want.Payload) || got.ServerVersion != 1 || !slices.Equal(got.Scopes, want.Scopes) {
		t.Errorf("row a = %s, want %s", fmtRow(got), fmtRow(want.Row))
	}
}

func testQueryAggregates(t *testing.T, open Opener) {
	e := newQueryEnv(t, open)
	e.put("p",
		item{id: "a", project: "p1", n: ptr[int64](3), f: ptr(1.25)},
		item{id: "b", project: "p1", n: ptr[int64](4), f: ptr(2.5)},
		item{id: "c", project: "p1"},
		item{id: "d", project: "p2", n: ptr[int64](100)},
	)
	e.put("other", item{id: "z", project: "p1", n: ptr[int64](1000)})
	p1 := []store.Filter{store.Eq("project_id", "p1")}
	count := func(q store.Query) int64 {
		t.Helper()
		res, err := e.query(q, store.Aggregate{Kind: store.AggCount})
		if err != nil {
			t.Fatal(err)
		}
		return res.Count
	}
	if n := count(store.Query{Table: tableItems, Where: p1}); n != 3 {
		t.Errorf("count p1 = %d, want 3", n)
	}
	if n := count(store.Query{Table: tableItems, Where: p1, Limit: 2}); n != 2 {
		t.Errorf("count p1 limit 2 = %d, want 2", n)
	}
	if n := count(store.Query{Table: tableItems, Where: []store.Filter{store.Eq("project_id", "p9")}}); n != 0 {
		t.Errorf("count p9 = %d, want 0", n)
	}
	res, err := e.query(store.Query{Table: tableItems, Where: p1}, store.Aggregate{Kind: store.AggSum, Column: "n"})
	if err != nil || res.Sum.Int != 7 {
		t.Errorf("sum n over p1 = %+v, %v; want 7", res.Sum, err)
	}
	res, err = e.query(store.Query{Table: tableItems, Where: p1}, store.Aggregate{Kind: store.AggSum, Column: "f"})
	if err != nil || res.Sum.Float != 3.75 {
		t.Errorf("sum f over p1 = %+v, %v; want 3.75", res.Sum, err)
	}
	res, err = e.query(store.Query{Table: tableItems, Where: []store.Filter{store.Eq("project_id", "p9")}}, store.Aggregate{Kind: store.AggSum, Column: "n"})
	if err != nil || res.Sum.Int != 0 || res.Sum.Null {
		t.Errorf("sum over no row = %+v, %v; want 0", res.Sum, err)
	}
	for _, tt := range []struct {
		where []store.Filter
		want  bool
	}{
		{[]store.Filter{store.Eq("n", 100)}, true},
		{[]store.Filter{store.Eq("n", 1000)}, false}, // another partition's row
	} {
		res, err := e.query(store.Query{Table: tableItems, Where: tt.where}, store.Aggregate{Kind: store.AggExists})
		if err != nil || res.Exists != tt.want {
			t.Errorf("exists %+v = %v, %v; want %v", tt.where, res.Exists, err, tt.want)
		}
	}
}

// A query sees what its transaction staged (an upsert and a delete), and
// what a failed candidate undid is gone from it too.
func testQueryStaged(t *testing.T, open Opener) {
	e := newQueryEnv(t, open)
	e.put("p", item{id: "a", project: "p1"}, item{id: "b", project: "p1"})
	countIn := func(ctx context.Context, tx store.WriteTx) int64 {
		t.Helper()
		res, err := tx.(store.QueryTx).Query(ctx, store.Query{Table: tableItems, Where: []store.Filter{store.Eq("project_id", "p1")}},
			store.Aggregate{Kind: store.AggCount})
		if err != nil {
			t.Fatal(err)
		}
		return res.Count
	}
	e.inTx("p", func(ctx context.Context, tx store.WriteTx) {
		if n := countIn(ctx, tx); n != 2 {
			t.Errorf("count before = %d, want 2", n)
		}
		if err := tx.UpsertRow(ctx, NewRowWrite(t, e.sc, tableItems, item{id: "c", project: "p1"}.values(), 1)); err != nil {
			t.Fatal(err)
		}
		if err := tx.DeleteRow(ctx, tableItems, "a"); err != nil {
			t.Fatal(err)
		}
		if n := countIn(ctx, tx); n != 2 {
			t.Errorf("count after an insert and a delete = %d, want 2", n)
		}
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if err := tx.UpsertRow(ctx, NewRowWrite(t, e.sc, tableItems, item{id: "d", project: "p1"}.values(), 1)); err != nil {
				return err
			}
			if n := countIn(ctx, tx); n != 3 {
				t.Errorf("count inside the candidate = %d, want 3", n)
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Fatalf("candidate: %v", err)
		}
		if n := countIn(ctx, tx); n != 2 {
			t.Errorf("count after the rolled-back candidate = %d, want 2", n)
		}
	})
	if got := e.ids(store.Query{Table: tableItems}); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("committed rows %q, want [b c]", got)
	}
}

// What the schema cannot answer is refused with CodeInvalidQuery, before
// any statement: the transaction goes on and commits.
func testQueryRefusals(t *testing.T, open Opener) {
	e := newQueryEnv(t, open)
	bad := []struct {
		name string
		q    store.Query
		agg  store.Aggregate
	}{
		{"unknown table", store.Query{Table: "nope"}, store.Aggregate{}},
		{"table not materialized", store.Query{Table: tableSealed}, store.Aggregate{}},
		{"unknown column", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("nope", "x")}}, store.Aggregate{}},
		{"wrong value type", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("n", "3")}}, store.Aggregate{}},
		{"integer overflow", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("n", uint64(1)<<63)}}, store.Aggregate{}},
		{"nil operand", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("title", nil)}}, store.Aggregate{}},
		{"NUL in a string", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("title", "a\x00")}}, store.Aggregate{}},
		{"lt on bytes", store.Query{Table: tableItems, Where: []store.Filter{store.Lt("blob", []byte{1})}}, store.Aggregate{}},
		{"comparison on json", store.Query{Table: tableItems, Where: []store.Filter{store.Eq("doc", "{}")}}, store.Aggregate{}},
		{"order by json", store.Query{Table: tableItems, OrderBy: []store.Order{store.Asc("doc")}}, store.Aggregate{}},
		{"unknown operator", store.Query{Table: tableItems, Where: []store.Filter{{Column: "n", Op: 99, Value: 1}}}, store.Aggregate{}},
		{"limit too large", store.Query{Table: tableItems, Limit: store.MaxQueryLimit + 1}, store.Aggregate{}},
		{"negative limit", store.Query{Table: tableItems, Limit: -1}, store.Aggregate{}},
		{"sum of a string", store.Query{Table: tableItems}, store.Aggregate{Kind: store.AggSum, Column: "title"}},
		{"order on a count", store.Query{Table: tableItems, OrderBy: []store.Order{store.Asc("n")}}, store.Aggregate{Kind: store.AggCount}},
		{"too many values", store.Query{Table: tableItems, Where: []store.Filter{store.In("n", make([]any, store.MaxQueryValues+1)...)}}, store.Aggregate{}},
	}
	e.inTx("p", func(ctx context.Context, tx store.WriteTx) {
		for _, b := range bad {
			_, err := tx.(store.QueryTx).Query(ctx, b.q, b.agg)
			if store.ErrorCode(err) != store.CodeInvalidQuery {
				t.Errorf("%s: err %v, want %s", b.name, err, store.CodeInvalidQuery)
			}
		}
		// The transaction is intact.
		if err := tx.UpsertRow(ctx, NewRowWrite(t, e.sc, tableItems, item{id: "ok", project: "p1"}.values(), 1)); err != nil {
			t.Fatalf("write after refusals: %v", err)
		}
	})
	if got := e.ids(store.Query{Table: tableItems}); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("rows %q, want [ok]", got)
	}
}
