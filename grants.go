package syncgo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/remotesql"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// GrantQuery grants values of a scope variable from the application's own
// synced rows, such as a membership table: every resolution of an actor's
// scopes (each request, each socket's re-resolution) runs it and adds the
// values of its first column to what ResolveScopes returned. It applies
// only when ResolveScopes succeeded: a failing resolver still fails
// closed, and so does a failing grant query.
//
//	GrantQuery{Variable: "list_id", SQL: "SELECT list_id FROM list_members WHERE user_id = :actor"}
//
// The SQL is checked and run as a privileged registered query's
// (REMOTE.md §2, Query): one SELECT in the SQL both drivers speak, naming
// application tables unqualified, each bound to the actor's partition
// (every row of the partition, whatever its scopes). Its only parameter is
// :actor, the actor's id. A NULL value is skipped, numbers and booleans
// grant their text, and a "*" in the data is never a wildcard (it is
// dropped, as a claim's "*" is). More than MaxValues rows fail the
// resolution.
//
// A commit that writes a table a grant query reads makes every socket of
// its partition resolve its scopes again before that commit's deltas are
// delivered (on every process of a fleet): a socket whose grant was
// narrowed gets no delta of the scope it lost after the commit that took
// it away.
//
// With Config.Leases, a lease records what its round resolved, the grant
// queries' values included: while ResolveScopes returns
// ErrAuthorityUnavailable, rounds are served on those recorded scopes
// (a membership removed meanwhile is honoured once the authority is back,
// or at once with RevokeLease).
type GrantQuery struct {
	// Variable is the scope variable granted; the schema must declare it.
	Variable string
	// SQL is the statement; its first column holds the granted values.
	SQL string
	// PostgresSQL, when set, replaces SQL on a Postgres store.
	PostgresSQL string
	// MaxValues bounds the rows read, 1 to 100,000; 0 means 10,000.
	MaxValues int
}

// grantParam is the parameter every grant query may use.
const grantParam = "actor"

// grantQueries are the compiled GrantQueries of a server.
type grantQueries struct {
	querier store.RemoteQuerier
	target  remotesql.Target
	queries []compiledGrant
	// tables are the application tables the queries read.
	tables map[string]bool
	// passRows bounds the rows of a pass's statement (grantPassRows).
	passRows int
	// eachFailed marks the queries whose batched statement failed once:
	// passes read them per actor from then on (a text actor compared
	// with another type fails every time).
	eachFailed []atomic.Bool
	// passHits counts resolutions served from a pass.
	passHits atomic.Int64
}

type compiledGrant struct {
	variable string
	stmt     *remotesql.Statement
	rels     []remotesql.Relation
	max      int
}

// compileGrants checks the grant queries against the schema for the
// store's dialect (st nil: SQLite, no querier, for a configuration check).
func compileGrants(qs []GrantQuery, sc *schema.Compiled, st store.Store) (*grantQueries, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	g := &grantQueries{tables: map[string]bool{}, passRows: grantPassRows}
	dialect := remotesql.SQLite
	if st != nil {
		q, ok := st.(store.RemoteQuerier)
		if !ok {
			return nil, errors.New("GrantQueries need a store that runs queries (store.RemoteQuerier)")
		}
		g.querier = q
		t := q.RemoteTarget()
		if t.Dialect == store.DialectPostgres {
			dialect = remotesql.Postgres
		}
		g.target = remotesql.Target{Dialect: dialect, Schema: t.Schema}
	}
	for i, q := range qs {
		cg, err := compileGrant(q, dialect, sc)
		if err != nil {
			return nil, fmt.Errorf("GrantQueries[%d] (%s): %w", i, q.Variable, err)
		}
		for _, t := range cg.stmt.Tables {
			g.tables[t] = true
		}
		g.queries = append(g.queries, cg)
	}
	g.eachFailed = make([]atomic.Bool, len(g.queries))
	return g, nil
}

func compileGrant(q GrantQuery, d remotesql.Dialect, sc *schema.Compiled) (compiledGrant, error) {
	if !sc.DeclaresVariable(q.Variable) {
		return compiledGrant{}, fmt.Errorf("the schema declares no scope variable %q", q.Variable)
	}
	max := q.MaxValues
	switch {
	case max == 0:
		max = 10000
	case max < 1 || max > 100000:
		return compiledGrant{}, errors.New("MaxValues must be from 1 to 100,000")
	}
	text := q.SQL
	if d == remotesql.Postgres && q.PostgresSQL != "" {
		text = q.PostgresSQL
	}
	if text == "" {
		return compiledGrant{}, errors.New("the SQL is empty")
	}
	tables := remotesql.SchemaOf(sc)
	st, err := remotesql.Parse(text, d, tables)
	if err != nil {
		return compiledGrant{}, err
	}
	if len(st.Tables) == 0 {
		return compiledGrant{}, errors.New("the SQL names no table of the schema")
	}
	for _, p := range st.Params {
		if p != grantParam {
			return compiledGrant{}, fmt.Errorf("the SQL uses :%s; a grant query's only parameter is :%s", p, grantParam)
		}
	}
	cg := compiledGrant{variable: q.Variable, stmt: st, max: max}
	for _, name := range st.Tables {
		t, _ := sc.Table(name)
		rel := remotesql.Relation{Table: name}
		for _, c := range t.Columns() {
			rel.Columns = append(rel.Columns, c.Name)
		}
		cg.rels = append(cg.rels, rel)
	}
	return cg, nil
}

// CheckGrantQueries checks grant queries against a schema as New does,
// for both SQL dialects, without a store: for a configuration check.
func CheckGrantQueries(qs []GrantQuery, sc *schema.Compiled) error {
	for i, q := range qs {
		if err := CheckGrantQuery(q, sc); err != nil {
			return fmt.Errorf("GrantQueries[%d] (%s): %w", i, q.Variable, err)
		}
	}
	return nil
}

// CheckGrantQuery checks one grant query against a schema for both SQL
// dialects.
func CheckGrantQuery(q GrantQuery, sc *schema.Compiled) error {
	if _, err := compileGrant(q, remotesql.SQLite, sc); err != nil {
		return err
	}
	if _, err := compileGrant(q, remotesql.Postgres, sc); err != nil {
		return fmt.Errorf("Postgres: %w", err)
	}
	return nil
}

// reads reports whether a commit writes a table the grant queries read.
func (g *grantQueries) reads(n CommitNotice) bool {
	for i := range n.Changes {
		if g.tables[n.Changes[i].Table] {
			return true
		}
	}
	return false
}

// wrap returns a resolver that adds the grant queries' values to what
// next returns.
func (g *grantQueries) wrap(next func(context.Context, ScopeRequest) (map[string][]string, error)) func(context.Context, ScopeRequest) (map[string][]string, error) {
	return func(ctx context.Context, req ScopeRequest) (map[string][]string, error) {
		allowed, err := next(ctx, req)
		if err != nil {
			return allowed, err
		}
		return g.add(ctx, req, allowed)
	}
}

// add runs the grant queries for the actor and returns allowed with their
// values added (a copy where anything is added: the host's map is not
// written).
func (g *grantQueries) add(ctx context.Context, req ScopeRequest, allowed map[string][]string) (map[string][]string, error) {
	out := allowed
	copied := map[string]bool{}
	for qi, q := range g.queries {
		values, err := g.run(ctx, q, qi, req)
		if err != nil {
			return nil, err
		}
		if len(values) == 0 || slices.Contains(out[q.variable], AllAllowed) {
			continue
		}
		if !copied[q.variable] {
			if len(copied) == 0 {
				out = make(map[string][]string, len(allowed)+1)
				for k, v := range allowed {
					out[k] = v
				}
			}
			out[q.variable] = slices.Clone(out[q.variable])
			copied[q.variable] = true
		}
		out[q.variable] = append(out[q.variable], values...)
	}
	for v := range copied {
		slices.Sort(out[v])
		out[v] = slices.Compact(out[v])
	}
	return out, nil
}

// run reads one grant query's values for the actor: from the pass the
// context carries (prepare) when it read them.
func (g *grantQueries) run(ctx context.Context, q compiledGrant, qi int, req ScopeRequest) ([]string, error) {
	if pass, _ := ctx.Value(grantPassKey{}).(*grantPass); pass != nil {
		if r, ok := pass.read[grantPassEntry{req.Partition, req.ActorID, qi}]; ok {
			pass.hits.Add(1)
			engine.ReadAt(ctx, pass.started) // values read then, not now
			return r.values, r.err
		}
	}
	composed, err := q.stmt.Compose(g.target, req.Partition, q.rels, map[string]any{grantParam: req.ActorID}, q.max+1)
	if err != nil {
		return nil, fmt.Errorf("grant query for %s: %w", q.variable, err)
	}
	res, err := g.querier.RemoteQuery(ctx, req.Partition, store.RemoteStatement{SQL: composed.SQL, Args: composed.Args, NoCommitSeq: true})
	if err != nil {
		return nil, fmt.Errorf("grant query for %s: %w", q.variable, err)
	}
	return q.values(res.Rows, 0)
}

// values reads the values the query grants from column col of its result
// rows: more than MaxValues rows fail.
func (q compiledGrant) values(rows [][]any, col int) ([]string, error) {
	if len(rows) > q.max {
		return nil, fmt.Errorf("grant query for %s: more than %d values", q.variable, q.max)
	}
	values := make([]string, 0, len(rows))
	for _, row := range rows {
		if len(row) <= col {
			return nil, fmt.Errorf("grant query for %s: the result has no column", q.variable)
		}
		if v, ok := grantValue(row[col]); ok {
			values = append(values, v)
		}
	}
	return values, nil
}

// grantValue is the scope value a database value grants: a string as it
// is, an integer or a float in its decimal text, a boolean as true or
// false. NULL, bytes, "*" and strings that cannot be scope values grant
// nothing.
func grantValue(v any) (string, bool) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case int64:
		s = strconv.FormatInt(x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", false
		}
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		s = strconv.FormatBool(x)
	default:
		return "", false
	}
	if s == "" || s == AllAllowed || len(s) > MaxIdentifierBytes || !utf8.ValidString(s) || slices.Contains([]byte(s), 0) {
		return "", false
	}
	return s, true
}

// A grant pass holds the grant queries' values of many actors, read in a
// few statements before their sockets are resolved again one by one
// (prepare): on Postgres one statement reads a query's values for up to
// grantPassChunk actors, where one each would cost a round trip and a
// plan.
type grantPass struct {
	read map[grantPassEntry]grantPassResult
	// started is when the pass began reading.
	started time.Time
	hits    *atomic.Int64 // grantQueries.passHits
}

type grantPassKey struct{}

type grantPassEntry struct {
	partition, actor string
	query            int
}

type grantPassResult struct {
	values []string
	err    error
}

// grantPassChunk is the most actors one statement of a pass reads for,
// grantPassRows the most rows it reads (a chunk that reaches it is left
// to the actors' own queries, so that a pass holds at most so many values
// of a chunk in memory).
const (
	grantPassChunk = 512
	grantPassRows  = 20000
)

// prepare reads the grant queries' values of the actors (partition →
// actor ids) and returns a context that carries them to the resolutions
// that follow. It reads nothing on SQLite (a query there costs no round
// trip). An actor whose statement failed is left out: its resolution runs
// its own queries, and fails closed if they fail too. A statement can fail
// where the actor's own would not (the actor is compared as text).
func (g *grantQueries) prepare(ctx context.Context, actors map[string][]string) context.Context {
	if g.target.Dialect != remotesql.Postgres {
		return ctx
	}
	pass := &grantPass{read: map[grantPassEntry]grantPassResult{}, started: time.Now(), hits: &g.passHits}
	for partition, ids := range actors {
		ids = slices.Clone(ids)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		for qi, q := range g.queries {
			if g.eachFailed[qi].Load() {
				continue
			}
			for lo := 0; lo < len(ids); lo += grantPassChunk {
				if ctx.Err() != nil {
					return context.WithValue(ctx, grantPassKey{}, pass)
				}
				g.readPass(ctx, pass, partition, qi, q, ids[lo:min(lo+grantPassChunk, len(ids))])
			}
		}
	}
	return context.WithValue(ctx, grantPassKey{}, pass)
}

// readPass reads one grant query's values for a chunk of actors into the
// pass.
func (g *grantQueries) readPass(ctx context.Context, pass *grantPass, partition string, qi int, q compiledGrant, ids []string) {
	composed, err := q.stmt.ComposeEach(g.target, partition, q.rels, nil, grantParam, ids, q.max+1, g.passRows)
	if err != nil {
		return
	}
	res, err := g.querier.RemoteQuery(ctx, partition, store.RemoteStatement{SQL: composed.SQL, Args: composed.Args, NoCommitSeq: true})
	if err != nil && ctx.Err() == nil {
		g.eachFailed[qi].Store(true)
	}
	if err != nil || len(res.Columns) < 2 || len(res.Rows) >= g.passRows {
		return // at the bound: the chunk's actors run their own queries
	}
	byActor := make(map[string][][]any, len(ids))
	for _, id := range ids {
		byActor[id] = nil
	}
	for _, row := range res.Rows {
		id, _ := row[0].(string)
		rows, ok := byActor[id]
		if !ok {
			return // not an actor asked for: trust nothing of this statement
		}
		byActor[id] = append(rows, row)
	}
	for id, rows := range byActor {
		values, err := q.values(rows, 1)
		pass.read[grantPassEntry{partition, id, qi}] = grantPassResult{values: values, err: err}
	}
}
