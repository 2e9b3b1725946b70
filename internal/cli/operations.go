package cli

import (
	"fmt"
	"slices"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/internal/remotesql"
	"github.com/syncgo/syncgo/schema"
)

// buildOperations maps the operations section of the config file onto
// syncgo.Operations. config.Validate has checked the type names and the
// parameters the coverage names.
func buildOperations(c config.Operations) syncgo.Operations {
	ops := syncgo.Operations{MaxRequestBytes: c.MaxRequestBytes, MaxWatches: c.MaxWatches}
	for _, q := range c.Queries {
		sq := syncgo.Query{ID: q.ID, SQL: q.SQL, PostgresSQL: q.PostgresSQL, Tables: q.Tables, MaxRows: q.MaxRows}
		for _, p := range q.Params {
			t, _ := p.ColumnType()
			sq.Params = append(sq.Params, syncgo.Param{Name: p.Name, Type: t, Nullable: p.Nullable})
		}
		for _, col := range q.Columns {
			t, _ := col.ColumnType()
			sq.Columns = append(sq.Columns, syncgo.ResultColumn{Name: col.Name, Type: t, Nullable: col.Nullable})
		}
		if len(q.Coverage) > 0 {
			sq.Coverage = coverageFunc(q.Coverage)
		}
		ops.Queries = append(ops.Queries, sq)
	}
	return ops
}

// coverageFunc returns the Coverage of a declared coverage: ":name"
// values are replaced by the request's string parameter name.
func coverageFunc(decl []config.Coverage) func(syncgo.Params) ([]syncgo.Coverage, error) {
	return func(p syncgo.Params) ([]syncgo.Coverage, error) {
		out := make([]syncgo.Coverage, 0, len(decl))
		for _, d := range decl {
			c := syncgo.Coverage{Table: d.Table, Scopes: make(map[string][]string, len(d.Scopes))}
			for v, values := range d.Scopes {
				resolved := make([]string, 0, len(values))
				for _, value := range values {
					if name, ok := config.ParamRef(value); ok {
						s, _ := p[name].(string)
						value = s
					}
					resolved = append(resolved, value)
				}
				c.Scopes[v] = resolved
			}
			out = append(out, c)
		}
		return out, nil
	}
}

// checkOperations compiles the declared operations against the schema
// with the library's checks (both dialects), then checks each declared
// coverage as serving would per request: one entry for every table the
// SQL names, each covering exactly that table's scope variables.
func checkOperations(c config.Operations, sc *schema.Compiled) error {
	if err := syncgo.CheckOperations(buildOperations(c), sc); err != nil {
		return err
	}
	tables := remotesql.SchemaOf(sc)
	for _, q := range c.Queries {
		if err := checkCoverage(q, q.SQL, remotesql.SQLite, sc, tables); err != nil {
			return err
		}
		if q.PostgresSQL != "" {
			if err := checkCoverage(q, q.PostgresSQL, remotesql.Postgres, sc, tables); err != nil {
				return fmt.Errorf("%w (postgres_sql)", err)
			}
		}
	}
	return nil
}

// checkCoverage checks the declared coverage of q against the tables
// that text names.
func checkCoverage(q config.Query, text string, d remotesql.Dialect, sc *schema.Compiled, tables remotesql.Schema) error {
	st, err := remotesql.Parse(text, d, tables)
	if err != nil {
		return fmt.Errorf("query %q: %w", q.ID, err)
	}
	var covered []string
	for _, cov := range q.Coverage {
		t, ok := sc.Table(cov.Table)
		if !ok || !slices.Contains(st.Tables, cov.Table) || slices.Contains(covered, cov.Table) {
			return fmt.Errorf("query %q: coverage names table %q twice or one the SQL does not read (it reads %v)", q.ID, cov.Table, st.Tables)
		}
		covered = append(covered, cov.Table)
		vars := t.Variables()
		if len(cov.Scopes) != len(vars) {
			return fmt.Errorf("query %q: coverage of %s must cover exactly its scope variables %v", q.ID, cov.Table, vars)
		}
		for _, v := range vars {
			if _, ok := cov.Scopes[v]; !ok {
				return fmt.Errorf("query %q: coverage of %s must cover exactly its scope variables %v", q.ID, cov.Table, vars)
			}
		}
	}
	if len(covered) != len(st.Tables) {
		return fmt.Errorf("query %q: the SQL reads %v; coverage must name each (it names %v)", q.ID, st.Tables, covered)
	}
	return nil
}
