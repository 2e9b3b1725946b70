package sqlitestore

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/syncgo/syncgo/store"
)

// The core tables (migrations/001_core.sql) are brought to the layout this
// build needs when a store opens. A database another server created (the
// reference server before 0.23 has no sync_commits.writer_version, before
// 0.15 no sync_clients.wire_version) keeps its tables: CREATE TABLE IF NOT
// EXISTS would skip them, and the writer-fence trigger, which reads
// NEW.writer_version, would then break every append. So the open plans
// first, reading sqlite_master and pragma_table_info: missing tables,
// indexes and the trigger are created, missing columns of existing tables
// added (with the reference's own values: writer_version NULL, the mark of
// a writer without a version; wire_version 1), in that order, in one
// transaction; a core table that cannot be brought to the layout is
// refused before anything is written; a database already at the layout
// gets no DDL and no write lock.

// coreObject is one CREATE statement of the core DDL.
type coreObject struct {
	kind  string // "table", "index" or "trigger", as sqlite_master spells it
	name  string
	table string // the table it belongs to
	sql   string
}

// coreColumn is a column a core table must have; add is the column
// definition that ALTER TABLE ADD COLUMN gives a table without it, or ""
// when a table without it cannot be used.
type coreColumn struct {
	name string
	add  string
}

// coreColumns returns the columns of each core table (store.CoreTables),
// with the definitions of the columns later lines added
// (TestCoreColumnsMatchDDL holds them to migrations/001_core.sql).
func coreColumns() map[string][]coreColumn {
	added := map[string]string{
		"sync_commits.writer_version": "INTEGER",
		"sync_clients.wire_version":   "INTEGER NOT NULL DEFAULT 1",
		"sync_segments.log_epoch":     "TEXT NOT NULL DEFAULT ''",
	}
	tables := store.CoreTables()
	out := make(map[string][]coreColumn, len(tables))
	for t, cols := range tables {
		for _, c := range cols {
			out[t] = append(out[t], coreColumn{name: c.Name, add: added[t+"."+c.Name]})
		}
	}
	return out
}

var createHeader = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX|TRIGGER)\s+IF\s+NOT\s+EXISTS\s+(\w+)\s*(?:\(|.*?\bON\s+(\w+))`)

// parseCoreDDL splits the core DDL into its CREATE statements: a statement
// ends with a line ending in ';', a trigger with its END; line.
func parseCoreDDL(script string) ([]coreObject, error) {
	var (
		out []coreObject
		cur []string
	)
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if len(cur) == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		cur = append(cur, line)
		stmt := strings.TrimSpace(strings.Join(cur, "\n"))
		trigger := strings.HasPrefix(strings.ToUpper(stmt), "CREATE TRIGGER")
		if !strings.HasSuffix(trimmed, ";") || (trigger && !strings.EqualFold(trimmed, "END;")) {
			continue
		}
		cur = nil
		m := createHeader.FindStringSubmatch(stmt)
		if m == nil {
			return nil, fmt.Errorf("core DDL: unexpected statement %q", stmt)
		}
		o := coreObject{kind: strings.ToLower(m[1]), name: m[2], table: m[3], sql: stmt}
		if o.kind == "table" {
			o.table = o.name
		}
		out = append(out, o)
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("core DDL: unterminated statement %q", strings.Join(cur, "\n"))
	}
	return out, nil
}

// ddlStep is one DDL step of a plan (core tables or Upgrade), with the
// line that describes it; sql may hold several statements.
type ddlStep struct {
	line string
	sql  string
}

func coreMismatch(details map[string]any) error {
	return &store.Error{Code: store.CodePhysicalLayoutMismatch,
		Message: "a core table of the database differs from the storage layout and cannot be migrated", Details: details}
}

// planCore reads the catalog and returns the DDL that brings the core
// tables to the layout, in order (a table's missing columns right after
// its place in the DDL, so before the indexes and the trigger that may
// read them); none when the database is at the layout. A core object it
// cannot bring there is a *store.Error, before anything is written. It
// only reads.
func planCore(c *conn) ([]ddlStep, error) {
	objects, err := parseCoreDDL(coreDDL)
	if err != nil {
		return nil, err
	}
	kinds := map[string]string{}
	rows, err := c.query(`SELECT name, type FROM sqlite_master`)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read catalog: %w", err)
		}
		kinds[strings.ToLower(name)] = kind
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	columns := coreColumns()
	var steps []ddlStep
	for _, o := range objects {
		kind, exists := kinds[strings.ToLower(o.name)]
		if !exists {
			steps = append(steps, ddlStep{line: "create " + o.kind + " " + o.name, sql: o.sql})
			continue
		}
		if kind != o.kind {
			return nil, coreMismatch(map[string]any{"table": o.table, "object": o.name, "reason": "object_type", "expected": o.kind, "actual": kind})
		}
		if o.kind != "table" {
			continue
		}
		have, err := physicalColumns(c, o.name)
		if err != nil {
			return nil, err
		}
		names := make(map[string]bool, len(have))
		for _, col := range have {
			names[strings.ToLower(col.name)] = true
		}
		for _, col := range columns[o.name] {
			if names[col.name] {
				continue
			}
			if col.add == "" {
				return nil, coreMismatch(map[string]any{"table": o.name, "column": col.name, "reason": "missing_column"})
			}
			steps = append(steps, ddlStep{
				line: "add column " + o.name + "." + col.name,
				sql:  "ALTER TABLE " + o.name + " ADD COLUMN " + col.name + " " + col.add,
			})
		}
	}
	return steps, nil
}

// stepLines are the descriptions of steps.
func stepLines(steps []ddlStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.line
	}
	return out
}
