// Package remotesql prepares the SQL of registered remote queries
// (REMOTE.md §2) for a storage driver: it checks the authored statement
// with a lexer of the SQL both drivers speak, and composes the statement
// that runs, in which every application table the query names is a
// partition-bound derived relation.
//
// The authored statement names application tables unqualified, as if they
// held only the application's columns, and takes its parameters as
// :name placeholders. The composed statement is
//
//	WITH "tasks" AS NOT MATERIALIZED (
//	    SELECT t."id", t."title", … FROM main."tasks" AS t
//	    WHERE t."_sync_partition" = ?1
//	      [AND EXISTS (SELECT 1 FROM main.sync_row_scopes s WHERE … s.value IN (covered values))]
//	), …
//	SELECT * FROM (<authored statement>) AS "_syncgo_query" LIMIT ?N
//
// so that each unqualified table name resolves to the common table
// expression, which shadows the physical table (SQLite and Postgres both
// resolve a CTE name before a table of the same name). The partition, the
// covered scope values and the row limit are bound parameters; nothing of
// a request is interpolated.
//
// What the lexer refuses (so that no physical table is read around the
// derived relations): a qualified reference to an application table
// (main.tasks, public.tasks, or alias.tasks), a table the schema does not
// materialize, any identifier of the storage namespace (sync_*, _sync_*),
// positional or other-style parameters, and more than one statement. The
// statement is otherwise trusted code: the lexer does not parse SQL and
// does not look inside string literals.
package remotesql

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/schema"
)

// Dialect is the SQL dialect of a driver.
type Dialect int

// The dialects.
const (
	SQLite Dialect = iota + 1
	Postgres
)

func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return "unknown"
}

// Statement is an authored statement that passed the checks.
type Statement struct {
	dialect Dialect
	// parts alternate: text, then a parameter reference (param >= 0) or
	// none (-1).
	parts []part
	// Params are the named parameters, in order of first use.
	Params []string
	// Tables are the application tables the statement names, sorted.
	Tables []string
}

type part struct {
	text  string
	param int // index into Params, or -1
}

// Schema describes the application tables for the checks: name →
// whether the table is materialized (queryable).
type Schema map[string]bool

// SchemaOf describes the tables of a compiled schema.
func SchemaOf(sc *schema.Compiled) Schema {
	tables := Schema{}
	for _, t := range sc.Tables() {
		tables[t.Name()] = t.Materialize()
	}
	return tables
}

// Parse checks an authored statement for a dialect.
func Parse(sql string, d Dialect, tables Schema) (*Statement, error) {
	if d != SQLite && d != Postgres {
		return nil, fmt.Errorf("remotesql: unknown dialect %d", d)
	}
	lower := make(map[string]string, len(tables))
	for name := range tables {
		lower[strings.ToLower(name)] = name
	}
	lx := &lexer{src: sql, d: d}
	st := &Statement{dialect: d}
	seenTables := map[string]bool{}
	params := map[string]int{}
	var (
		prev     token // previous significant token
		first    = true
		textFrom = 0
		ended    = false
	)
	for {
		tok, err := lx.next()
		if err != nil {
			return nil, err
		}
		if tok.kind == tEOF {
			break
		}
		if tok.kind == tSpace {
			continue
		}
		if ended {
			return nil, fmt.Errorf("remotesql: only one statement is allowed (text after ';' at offset %d)", tok.start)
		}
		if first {
			first = false
			if tok.kind != tWord && tok.text != "(" {
				return nil, fmt.Errorf("remotesql: the statement must be a SELECT")
			}
			if tok.kind == tWord {
				switch strings.ToUpper(tok.text) {
				case "SELECT", "WITH", "VALUES":
				default:
					return nil, fmt.Errorf("remotesql: the statement must be a SELECT, not %s", tok.text)
				}
			}
		}
		switch tok.kind {
		case tSemicolon:
			ended = true
			st.parts = append(st.parts, part{text: sql[textFrom:tok.start], param: -1})
			textFrom = len(sql)
		case tParam:
			name := tok.text
			i, ok := params[name]
			if !ok {
				i = len(st.Params)
				params[name] = i
				st.Params = append(st.Params, name)
			}
			st.parts = append(st.parts, part{text: sql[textFrom:tok.start], param: i})
			textFrom = tok.end
		case tWord, tQuoted:
			name := tok.ident
			ln := strings.ToLower(name)
			if strings.HasPrefix(ln, "sync_") || strings.HasPrefix(ln, "_sync_") {
				return nil, fmt.Errorf("remotesql: %q is a storage-internal identifier; a query reads application columns only", name)
			}
			if tname, ok := lower[ln]; ok {
				// Every word that spells a table name counts as a
				// reference: a conservative reading, so that no use of
				// a table escapes the derived relations.
				if !tables[tname] {
					return nil, fmt.Errorf("remotesql: table %q is not materialized and cannot be queried", tname)
				}
				if prev.kind == tDot {
					return nil, fmt.Errorf("remotesql: %q is qualified at offset %d: name application tables unqualified (the server binds them to the partition); a column of the same name as a table cannot be qualified either", name, tok.start)
				}
				seenTables[tname] = true
			}
		}
		prev = tok
	}
	if first {
		return nil, fmt.Errorf("remotesql: the statement is empty")
	}
	if textFrom < len(sql) {
		st.parts = append(st.parts, part{text: sql[textFrom:], param: -1})
	}
	for t := range seenTables {
		st.Tables = append(st.Tables, t)
	}
	slices.Sort(st.Tables)
	return st, nil
}

// Target says where a driver keeps the tables.
type Target struct {
	Dialect Dialect
	// Schema qualifies the physical tables: "main" for SQLite, the
	// connection's current schema for Postgres.
	Schema string
}

// Relation is the derived relation of one application table.
type Relation struct {
	Table string
	// Columns are the table's application columns, in schema order.
	Columns []string
	// Scopes restrict the rows to stored scope values; nil or empty: only
	// the partition is bound (privileged queries, or a variable the actor
	// may read in full).
	Scopes []ScopeFilter
}

// ScopeFilter keeps the rows whose stored value of Variable is one of
// Values.
type ScopeFilter struct {
	Variable string
	Values   []string
}

// Composed is an executable statement and its arguments.
type Composed struct {
	SQL  string
	Args []any
}

// Compose builds the statement that runs in a partition: rels must hold
// one relation for each of the statement's Tables, params a value for each
// of its Params (nil is NULL), and the result is limited to limit rows.
func (s *Statement) Compose(t Target, partition string, rels []Relation, params map[string]any, limit int) (Composed, error) {
	return s.compose(t, partition, rels, params, "", nil, limit, 0)
}

// EachColumn names the column that leads each row of a ComposeEach
// statement.
const EachColumn = "_syncgo_each"

// ComposeEach builds, on Postgres, one statement that runs the statement
// once for each of values bound to the parameter each (the other
// parameters taken from params), as a lateral join: each row is led by a
// column EachColumn holding the value it was read for, followed by the
// statement's columns; each value's rows are limited to limit, and all
// rows to total. The
// parameter is bound to a text column, not a placeholder: a statement
// that compares it with a column of another type fails to run, where
// Compose's placeholder would have taken that type.
func (s *Statement) ComposeEach(t Target, partition string, rels []Relation, params map[string]any, each string, values []string, limit, total int) (Composed, error) {
	if t.Dialect != Postgres {
		return Composed{}, fmt.Errorf("remotesql: ComposeEach needs Postgres, not %s", t.Dialect)
	}
	if !slices.Contains(s.Params, each) {
		return Composed{}, fmt.Errorf("remotesql: the statement has no parameter :%s", each)
	}
	return s.compose(t, partition, rels, params, each, values, limit, total)
}

// compose builds Compose's statement, or ComposeEach's when each is set.
func (s *Statement) compose(t Target, partition string, rels []Relation, params map[string]any, each string, values []string, limit, total int) (Composed, error) {
	if t.Dialect != s.dialect {
		return Composed{}, fmt.Errorf("remotesql: statement of dialect %s composed for %s", s.dialect, t.Dialect)
	}
	byTable := make(map[string]*Relation, len(rels))
	for i := range rels {
		byTable[rels[i].Table] = &rels[i]
	}
	var args []any
	ph := func(v any) string {
		args = append(args, v)
		if t.Dialect == Postgres {
			return "$" + strconv.Itoa(len(args))
		}
		return "?" + strconv.Itoa(len(args))
	}
	var b strings.Builder
	bound := ph(partition)
	for i, table := range s.Tables {
		r := byTable[table]
		if r == nil {
			return Composed{}, fmt.Errorf("remotesql: no relation for table %q", table)
		}
		if i == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(QuoteIdent(table))
		b.WriteString(" AS NOT MATERIALIZED (SELECT ")
		for j, c := range r.Columns {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("t." + QuoteIdent(c))
		}
		b.WriteString(" FROM " + QuoteIdent(t.Schema) + "." + QuoteIdent(table) + " AS t WHERE t.\"_sync_partition\" = " + bound)
		for _, f := range r.Scopes {
			b.WriteString(" AND EXISTS (SELECT 1 FROM " + QuoteIdent(t.Schema) + ".sync_row_scopes AS s WHERE s.partition = " +
				bound + " AND s.tbl = " + quoteLiteral(table) + " AND s.var = " + quoteLiteral(f.Variable) +
				" AND s.row_id = t.\"_sync_row_id\" AND s.value ")
			if t.Dialect == Postgres {
				b.WriteString("= ANY(" + ph(slices.Clone(f.Values)) + "::text[]))")
			} else {
				b.WriteString("IN (SELECT value FROM json_each(" + ph(jsonArray(f.Values)) + ")))")
			}
		}
		b.WriteString(")")
	}
	if len(s.Tables) > 0 {
		b.WriteString(" ")
	}
	eachRef := QuoteIdent(EachColumn) + ".v"
	if each != "" {
		b.WriteString("SELECT " + eachRef + " AS " + QuoteIdent(EachColumn) + ", \"_syncgo_query\".* FROM unnest(" +
			ph(slices.Clone(values)) + "::text[]) AS " + QuoteIdent(EachColumn) + "(v) CROSS JOIN LATERAL (")
	}
	b.WriteString("SELECT * FROM (")
	refs := make([]string, len(s.Params))
	for i, name := range s.Params {
		if name == each {
			refs[i] = eachRef
			continue
		}
		v, ok := params[name]
		if !ok {
			return Composed{}, fmt.Errorf("remotesql: no value for parameter :%s", name)
		}
		refs[i] = ph(v)
	}
	for _, p := range s.parts {
		b.WriteString(p.text)
		if p.param >= 0 {
			b.WriteString(refs[p.param])
		}
	}
	b.WriteString("\n) AS \"_syncgo_query\" LIMIT " + ph(int64(limit)))
	if each != "" {
		b.WriteString(") AS \"_syncgo_query\" LIMIT " + ph(int64(total)))
	}
	return Composed{SQL: b.String(), Args: args}, nil
}

// QuoteIdent quotes an SQL identifier (both dialects).
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// jsonArray renders strings as a JSON array (the json_each argument).
func jsonArray(values []string) string {
	if values == nil {
		values = []string{}
	}
	b, _ := json.Marshal(values) // strings always marshal
	return string(b)
}
