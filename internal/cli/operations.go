package cli

import (
	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/config"
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
