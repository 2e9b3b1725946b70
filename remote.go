package syncgo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/internal/remotesql"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Operations is the registry of remote operations (REMOTE.md): queries
// and commands that database-less processes call by ID over POST
// <mount>/operations, and queries they watch over the WebSocket
// <mount>/operations/realtime. See docs/remote-operations.md.
type Operations struct {
	// Queries are the registered read operations.
	Queries []Query
	// Commands are the registered write operations.
	Commands []Command
	// MaxRequestBytes caps an operation request body and a watch socket
	// message. Default 1 MiB.
	MaxRequestBytes int64
	// MaxWatches caps the watches of one socket. Default 64.
	MaxWatches int
}

// Caller identifies who calls an operation: the authenticated actor and
// partition, and the clientId the request names (a namespace, never a
// credential).
type Caller struct {
	ActorID   string
	Partition string
	ClientID  string
}

// Query is a registered authoritative query (REMOTE.md §2): SQL over the
// application tables, run read-only against the partition of the caller.
//
// The SQL names application tables unqualified and reads their
// application columns; the server binds every table it names to the
// caller's partition (and, for a scoped query, to the covered scope
// values), so it cannot read another partition's rows. Parameters are
// written :name and bound, never interpolated. Exactly one of Coverage
// (a scoped query) and Authorize (a privileged one) is set.
type Query struct {
	// ID is the operation's stable identifier, unique in the registry.
	ID string
	// SQL is the statement: one SELECT (or WITH … SELECT) in the SQL that
	// SQLite and Postgres share.
	SQL string
	// PostgresSQL, when set, replaces SQL on a Postgres store: for a
	// query that needs a dialect of its own.
	PostgresSQL string
	// Tables, when set, must list exactly the application tables the SQL
	// names; registration checks it. The tables named are what a watch
	// depends on.
	Tables []string
	// Params declare the parameters: each :name of the SQL (and any the
	// SQL does not use but Coverage or Authorize read), its type and
	// whether it may be null. A request's params object must hold exactly
	// these keys (a nullable one may be absent).
	Params []Param
	// Columns declare the result: the columns returned, in this order,
	// with their values normalized to these types. A missing column, a
	// null in a non-nullable one or a value of another type fails the
	// query (operation.query_failed). Other columns the SQL selects are
	// dropped.
	Columns []ResultColumn
	// MaxRows bounds the result, 1 to 10,000: a larger result fails with
	// operation.result_too_large, never truncated.
	MaxRows int
	// Coverage makes the query scoped: it returns, for the params of a
	// request, one record for every table the SQL names, covering every
	// scope variable of that table (REMOTE.md §2.1). Every covered value
	// must be allowed by ResolveScopes (else operation.forbidden), and
	// the table's rows are restricted to them.
	Coverage func(p Params) ([]Coverage, error)
	// Authorize makes the query privileged: it decides alone whether the
	// caller may run it (false: operation.forbidden). Its rows are bound
	// to the caller's partition only.
	Authorize func(ctx context.Context, c Caller, p Params) (bool, error)
}

// Param declares a query parameter. Its Type is one of wire.TypeString,
// TypeInteger, TypeFloat, TypeBoolean, TypeJSON (a JSON text, bound as a
// string) and TypeBytes.
type Param struct {
	Name     string
	Type     wire.ColumnType
	Nullable bool
}

// ResultColumn declares a result column of a query.
type ResultColumn struct {
	Name     string
	Type     wire.ColumnType
	Nullable bool
}

// Params are a request's decoded query parameters: string, int64,
// float64, bool or []byte by declared type, nil for null.
type Params map[string]any

// AllAllowed, as a covered value, covers every value of the variable the
// caller is allowed: the table's rows are restricted to the caller's
// allowed values, or not at all when the caller is allowed "*".
const AllAllowed = "*"

// Coverage is the scope coverage of one table a scoped query reads.
type Coverage struct {
	Table string
	// Scopes maps each scope variable the table declares to the values
	// the query reads (non-empty; AllAllowed for all the caller may).
	Scopes map[string][]string
}

// Command is a registered server-authoritative command (REMOTE.md §3):
// Go code that plans one ordinary commit, applied through the push path
// of a client commit, so that realtime subscribers, the commit log and
// pulls see it like any other.
type Command struct {
	// ID is the operation's stable identifier, unique in the registry.
	ID string
	// Authorize decides whether the caller may run the command (false:
	// operation.forbidden). Required.
	Authorize func(ctx context.Context, c Caller, input any) (bool, error)
	// Run returns the commit's mutations: at least one. It runs inside
	// the partition's write transaction, after the idempotency check,
	// and must not have side effects outside the commit: a retry of an
	// applied or rejected request replays the stored outcome without
	// running it, and a failed transaction may run it again. Its error
	// fails the request (operation.execution_failed unless it is a
	// *syncerr.Error) and writes nothing.
	//
	// input is the request's params: nil, bool, float64, string, int64,
	// []byte, []any or map[string]any.
	Run func(ctx context.Context, c *CommandContext, input any) ([]Mutation, error)
}

// Mutation is one operation of a command's commit: a full-row upsert or
// a delete. The ordinary write rules apply to it: scope authorization
// against the caller's resolved scopes, declared references, unique
// indexes.
type Mutation struct {
	Table string
	// Delete removes the row RowID; otherwise Values is the full row.
	Delete bool
	RowID  string
	// Values holds every column of the table (nil for NULL): string,
	// Go integers, float64, bool, []byte, and for a json column a JSON
	// text (string, []byte) or any value encoding/json marshals.
	// A crdt column's value is merged with the stored one (spec
	// §5.10.3), as a push's is: passing back the value CommandContext.Row
	// read leaves the document as it is, nil clears it.
	Values map[string]any
}

// Upsert is a mutation that writes a full row.
func Upsert(table string, values map[string]any) Mutation {
	return Mutation{Table: table, Values: values}
}

// Delete is a mutation that deletes a row.
func Delete(table, rowID string) Mutation { return Mutation{Table: table, Delete: true, RowID: rowID} }

// CommandContext is what a command's Run sees.
type CommandContext struct {
	Caller
	OperationID string
	RequestID   string

	tx      store.WriteTx
	schema  *schema.Compiled
	allowed map[string][]string
}

// Row reads a current row of the partition inside the command's
// transaction (it sees the stored state the commit will be applied to),
// as column name → value (nil, string, int64, float64, bool, []byte; a
// json column as its JSON text). A row absent, or outside the caller's
// allowed scopes, is reported as not found.
func (c *CommandContext) Row(ctx context.Context, table, rowID string) (map[string]any, bool, error) {
	t, ok := c.schema.Table(table)
	if !ok {
		return nil, false, opError(codeOpInvalidRequest, "the command reads an unknown table")
	}
	r, err := c.tx.Row(ctx, table, rowID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	vals, err := t.RowCodec().DecodeRow(r.Payload)
	if err != nil {
		// The server's fault, not the request's: kept as text so that no
		// wire.DecodeError in the chain makes it a client error.
		return nil, false, fmt.Errorf("stored row %s/%s does not decode: %v", table, rowID, err)
	}
	ss, err := t.StoredScopes(vals)
	if err != nil || !scopesAllowed(ss, c.allowed) {
		return nil, false, nil
	}
	out := make(map[string]any, len(vals))
	for i, col := range t.Columns() {
		out[col.Name] = wire.GoValue(col.Type, vals[i])
	}
	return out, true, nil
}

// scopesAllowed reports whether every stored scope value is allowed.
func scopesAllowed(ss schema.StoredScopes, allowed map[string][]string) bool {
	for _, sv := range ss {
		vals := allowed[sv.Variable]
		if !slices.Contains(vals, "*") && !slices.Contains(vals, sv.Value) {
			return false
		}
	}
	return true
}

// registry is the compiled Operations of a server.
type registry struct {
	queries  map[string]*compiledQuery
	commands map[string]*Command
	target   store.RemoteTarget
	querier  store.RemoteQuerier // nil: the store runs no queries
	maxBytes int64
	maxWatch int
}

// compiledQuery is a Query whose SQL passed the checks for the store.
type compiledQuery struct {
	q      Query
	stmt   *remotesql.Statement
	target remotesql.Target
	params map[string]Param
	tables []string
}

// compileOperations checks the registry against the served schema and
// the store's dialect.
func compileOperations(ops Operations, sc *schema.Compiled, st store.Store) (*registry, error) {
	r := &registry{queries: map[string]*compiledQuery{}, commands: map[string]*Command{},
		maxBytes: ops.MaxRequestBytes, maxWatch: ops.MaxWatches}
	if r.maxBytes <= 0 {
		r.maxBytes = 1 << 20
	}
	if r.maxWatch <= 0 {
		r.maxWatch = 64
	}
	dialect := remotesql.SQLite
	if q, ok := st.(store.RemoteQuerier); ok {
		r.querier, r.target = q, q.RemoteTarget()
		if r.target.Dialect == store.DialectPostgres {
			dialect = remotesql.Postgres
		}
	}
	tables := remotesql.SchemaOf(sc)
	seen := map[string]bool{}
	for i := range ops.Queries {
		q := ops.Queries[i]
		if q.ID == "" || seen[q.ID] {
			return nil, fmt.Errorf("operation ids must be non-empty and unique (query %q)", q.ID)
		}
		seen[q.ID] = true
		cq, err := compileQuery(q, dialect, tables)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", q.ID, err)
		}
		cq.target = remotesql.Target{Dialect: dialect, Schema: r.target.Schema}
		r.queries[q.ID] = cq
	}
	for i := range ops.Commands {
		c := &ops.Commands[i]
		if c.ID == "" || seen[c.ID] {
			return nil, fmt.Errorf("operation ids must be non-empty and unique (command %q)", c.ID)
		}
		seen[c.ID] = true
		if c.Authorize == nil || c.Run == nil {
			return nil, fmt.Errorf("command %q: Authorize and Run are required", c.ID)
		}
		r.commands[c.ID] = c
	}
	return r, nil
}

func compileQuery(q Query, d remotesql.Dialect, tables remotesql.Schema) (*compiledQuery, error) {
	if (q.Coverage == nil) == (q.Authorize == nil) {
		return nil, errors.New("exactly one of Coverage (scoped) and Authorize (privileged) must be set")
	}
	if q.MaxRows < 1 || q.MaxRows > 10000 {
		return nil, errors.New("MaxRows must be an integer from 1 to 10,000")
	}
	if len(q.Columns) == 0 {
		return nil, errors.New("Columns must declare the result columns")
	}
	cols := map[string]bool{}
	for _, c := range q.Columns {
		if c.Name == "" || cols[c.Name] || !c.Type.Valid() {
			return nil, fmt.Errorf("result column %q is empty, duplicate or of an unknown type", c.Name)
		}
		cols[c.Name] = true
	}
	cq := &compiledQuery{q: q, params: map[string]Param{}}
	for _, p := range q.Params {
		switch p.Type {
		case wire.TypeString, wire.TypeInteger, wire.TypeFloat, wire.TypeBoolean, wire.TypeJSON, wire.TypeBytes:
		default:
			return nil, fmt.Errorf("parameter %q has type %s, not one a parameter can have", p.Name, p.Type)
		}
		if p.Name == "" || cq.params[p.Name].Name != "" {
			return nil, fmt.Errorf("parameter %q is empty or duplicate", p.Name)
		}
		cq.params[p.Name] = p
	}
	text := q.SQL
	if d == remotesql.Postgres && q.PostgresSQL != "" {
		text = q.PostgresSQL
	}
	st, err := remotesql.Parse(text, d, tables)
	if err != nil {
		return nil, err
	}
	for _, name := range st.Params {
		if _, ok := cq.params[name]; !ok {
			return nil, fmt.Errorf("the SQL uses :%s, which Params does not declare", name)
		}
	}
	if q.Tables != nil {
		want := slices.Clone(q.Tables)
		slices.Sort(want)
		if !slices.Equal(slices.Compact(want), st.Tables) || len(want) != len(q.Tables) {
			return nil, fmt.Errorf("Tables lists %v, but the SQL names %v", q.Tables, st.Tables)
		}
	}
	cq.stmt, cq.tables = st, st.Tables
	return cq, nil
}

// relations builds the derived relations of a query for a caller:
// scoped queries check the coverage against the caller's allowed scopes
// (REMOTE.md §2.1) and restrict each table to it.
func (cq *compiledQuery) relations(sc *schema.Compiled, p Params, allowed map[string][]string) ([]remotesql.Relation, error) {
	var byTable map[string]Coverage
	if cq.q.Coverage != nil {
		cov, err := cq.q.Coverage(p)
		if err != nil {
			return nil, err
		}
		byTable = make(map[string]Coverage, len(cov))
		for _, c := range cov {
			if _, dup := byTable[c.Table]; dup || !slices.Contains(cq.tables, c.Table) {
				return nil, opError(codeOpInvalidRequest, "the query's scope coverage names a table twice or one it does not read")
			}
			byTable[c.Table] = c
		}
	}
	rels := make([]remotesql.Relation, 0, len(cq.tables))
	for _, name := range cq.tables {
		t, _ := sc.Table(name)
		rel := remotesql.Relation{Table: name}
		for _, c := range t.Columns() {
			rel.Columns = append(rel.Columns, c.Name)
		}
		if byTable != nil {
			c, ok := byTable[name]
			if !ok || len(c.Scopes) != len(t.Variables()) {
				return nil, opError(codeOpInvalidRequest, "the query's scope coverage is incomplete")
			}
			for _, v := range t.Variables() {
				values, ok := c.Scopes[v]
				if !ok || len(values) == 0 {
					return nil, opError(codeOpInvalidRequest, "the query's scope coverage is incomplete")
				}
				f, err := coverFilter(v, values, allowed)
				if err != nil {
					return nil, err
				}
				if f != nil {
					rel.Scopes = append(rel.Scopes, *f)
				}
			}
		}
		rels = append(rels, rel)
	}
	return rels, nil
}

// coverFilter checks the covered values of a variable and returns the
// filter that restricts a table to them (nil: the caller may read every
// value).
func coverFilter(variable string, values []string, allowed map[string][]string) (*remotesql.ScopeFilter, error) {
	may := allowed[variable]
	all := slices.Contains(may, "*")
	if slices.Contains(values, AllAllowed) {
		if all {
			return nil, nil
		}
		if len(may) == 0 {
			return nil, opError(codeOpForbidden, "the caller may read no value of "+variable)
		}
		return &remotesql.ScopeFilter{Variable: variable, Values: slices.Clone(may)}, nil
	}
	for _, v := range values {
		if !all && !slices.Contains(may, v) {
			return nil, opError(codeOpForbidden, "the caller may not read "+variable+" "+v)
		}
	}
	return &remotesql.ScopeFilter{Variable: variable, Values: slices.Clone(values)}, nil
}

// decodeParams checks a request's params against the declared ones.
func (cq *compiledQuery) decodeParams(raw any) (Params, error) {
	p := Params{}
	var obj map[string]any
	switch v := toGo(raw).(type) {
	case nil:
	case map[string]any:
		obj = v
	default:
		return nil, opError(codeOpInvalidRequest, "params must be an object")
	}
	for k := range obj {
		if _, ok := cq.params[k]; !ok {
			return nil, opError(codeOpInvalidRequest, "params has an undeclared key "+k)
		}
	}
	for name, decl := range cq.params {
		v, present := obj[name]
		if !present || v == nil {
			if !decl.Nullable {
				return nil, opError(codeOpInvalidRequest, "param "+name+" is required")
			}
			p[name] = nil
			continue
		}
		x, ok := paramValue(decl.Type, v)
		if !ok {
			return nil, opError(codeOpInvalidRequest, fmt.Sprintf("param %s must be of type %s", name, decl.Type))
		}
		if s, isText := x.(string); isText && strings.IndexByte(s, 0) >= 0 {
			// Postgres text cannot hold it: refused on both drivers alike.
			return nil, opError(codeOpInvalidRequest, "param "+name+" contains a NUL character")
		}
		p[name] = x
	}
	return p, nil
}

// paramValue coerces a decoded value to a parameter type: an integer
// takes an integer or an integral number, a float a number or an integer.
func paramValue(t wire.ColumnType, v any) (any, bool) {
	switch t {
	case wire.TypeString, wire.TypeJSON:
		s, ok := v.(string)
		return s, ok
	case wire.TypeBoolean:
		b, ok := v.(bool)
		return b, ok
	case wire.TypeBytes:
		b, ok := v.([]byte)
		return b, ok
	case wire.TypeInteger:
		switch n := v.(type) {
		case int64:
			return n, true
		case float64:
			if n == float64(int64(n)) && n >= -maxSafe && n <= maxSafe {
				return int64(n), true
			}
		}
	case wire.TypeFloat:
		switch n := v.(type) {
		case float64:
			return n, true
		case int64:
			return float64(n), true
		}
	}
	return nil, false
}

// maxSafe is 2^53 − 1, JavaScript's largest safe integer.
const maxSafe = 1<<53 - 1

// CheckOperations checks ops against a schema as New does, for both
// SQL dialects, without a store: for a configuration check.
func CheckOperations(ops Operations, sc *schema.Compiled) error {
	if _, err := compileOperations(ops, sc, nil); err != nil {
		return err
	}
	tables := remotesql.SchemaOf(sc)
	for _, q := range ops.Queries {
		if _, err := compileQuery(q, remotesql.Postgres, tables); err != nil {
			return fmt.Errorf("query %q (Postgres): %w", q.ID, err)
		}
	}
	return nil
}
