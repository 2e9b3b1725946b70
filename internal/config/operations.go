package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/syncgo/syncgo/wire"
)

// Operations declares remote operations (syncgo.Operations) for the
// binary: scoped queries only, since commands and privileged queries
// are Go functions (docs/remote-operations.md).
type Operations struct {
	// Queries are the registered queries (syncgo.Query).
	Queries []Query `yaml:"queries"`
	// MaxRequestBytes and MaxWatches are syncgo.Operations's; zero keeps
	// the library's default.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	MaxWatches      int   `yaml:"max_watches"`
}

// Query is one scoped query: the fields of syncgo.Query, with Coverage
// declared instead of written in Go.
type Query struct {
	ID          string   `yaml:"id"`
	SQL         string   `yaml:"sql"`
	PostgresSQL string   `yaml:"postgres_sql"`
	Tables      []string `yaml:"tables"`
	// Params and Columns are lists, in order (columns are returned in
	// this order).
	Params  []Column `yaml:"params"`
	Columns []Column `yaml:"columns"`
	MaxRows int      `yaml:"max_rows"`
	// Coverage is one entry per table the SQL names, covering every
	// scope variable of the table (syncgo.Coverage).
	Coverage []Coverage `yaml:"coverage"`
}

// Column declares a parameter or a result column: its name, its type
// (a schema IR type name: string, integer, float, boolean, json, bytes)
// and whether it may be null.
type Column struct {
	Name     string `yaml:"name"`
	Type     string `yaml:"type"`
	Nullable bool   `yaml:"nullable"`
}

// Coverage is the scope coverage of one table. Each value of Scopes is a
// literal scope value, "*" (syncgo.AllAllowed: every value the caller is
// allowed) or ":name", the value of the non-nullable string parameter
// name.
type Coverage struct {
	Table  string              `yaml:"table"`
	Scopes map[string][]string `yaml:"scopes"`
}

// ColumnType returns the wire type of a declared type name.
func (c Column) ColumnType() (wire.ColumnType, bool) { return wire.ParseColumnType(c.Type) }

// ParamRef returns the parameter a coverage value names (":name").
func ParamRef(value string) (string, bool) {
	name, ok := strings.CutPrefix(value, ":")
	return name, ok && name != ""
}

// validate checks what needs no schema; the binary compiles the queries
// against the schema with the library's checks (syncgo.CheckOperations).
func (o Operations) validate() error {
	var errs []error
	if o.MaxRequestBytes < 0 || o.MaxWatches < 0 {
		errs = append(errs, errors.New("operations: max_request_bytes and max_watches must not be negative"))
	}
	for i, q := range o.Queries {
		at := fmt.Sprintf("operations.queries[%d] (%s)", i, q.ID)
		if len(q.Coverage) == 0 {
			errs = append(errs, fmt.Errorf("%s: coverage is required (a query of the config file is scoped)", at))
		}
		params := map[string]Column{}
		for _, p := range q.Params {
			if _, ok := p.ColumnType(); !ok {
				errs = append(errs, fmt.Errorf("%s: param %q: unknown type %q", at, p.Name, p.Type))
			}
			params[p.Name] = p
		}
		for _, c := range q.Columns {
			if _, ok := c.ColumnType(); !ok {
				errs = append(errs, fmt.Errorf("%s: column %q: unknown type %q", at, c.Name, c.Type))
			}
		}
		for _, c := range q.Coverage {
			if c.Table == "" || len(c.Scopes) == 0 {
				errs = append(errs, fmt.Errorf("%s: a coverage entry needs a table and its scopes", at))
			}
			for v, values := range c.Scopes {
				if len(values) == 0 {
					errs = append(errs, fmt.Errorf("%s: coverage of %s.%s is empty", at, c.Table, v))
				}
				for _, value := range values {
					name, ok := ParamRef(value)
					if !ok {
						continue
					}
					if p, ok := params[name]; !ok || p.Type != "string" || p.Nullable {
						errs = append(errs, fmt.Errorf("%s: coverage %s.%s names %s, which is not a declared non-nullable string param", at, c.Table, v, value))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}
