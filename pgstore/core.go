package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/store"
)

// The core tables (migrations/*.sql) are brought to the layout this build
// needs when a store opens. Open first reads the catalog (planCore, one
// statement): a database at the layout gets no DDL, no lock and no write.
// Otherwise it runs, under the migration lock (lock.go), only the steps of
// what is missing: a table, an index, the writer-fence function (or its
// body, when it differs), the trigger, and the columns later versions added
// to tables that older servers created (coreColumns), with the values the
// reference gives old rows (writer_version NULL, wire_version 1, layouts
// '{}'). A core table that cannot be brought to the layout (a column
// without a way to add it, an object of another kind under the name) is
// refused before anything is written.

// coreObject is one CREATE statement of the core DDL.
type coreObject struct {
	kind  string // "table", "index", "function" or "trigger"
	name  string
	table string // the table it belongs to ("" for a function)
	sql   string
	// body is a function's body with its white space collapsed.
	body string
}

// coreColumn is a column a core table must have; add is the column
// definition that ALTER TABLE ADD COLUMN gives a table without it, or ""
// when a table without it cannot be used.
type coreColumn struct {
	name string
	add  string
}

// coreColumns returns the columns of each core table (store.CoreTables
// and the schema marker), with the definitions of the columns later lines
// added (TestCoreColumnsMatchDDL holds them to migrations/*.sql).
func coreColumns() map[string][]coreColumn {
	added := map[string]string{
		"sync_commits.writer_version": "BIGINT",
		"sync_clients.wire_version":   "INTEGER NOT NULL DEFAULT 1",
		// Reference servers that kept no layouts: an empty set.
		"sync_schema_meta.layouts": "TEXT NOT NULL DEFAULT '{}'",
		// The reference's segment store before it recorded epochs.
		"sync_segments.log_epoch": "TEXT NOT NULL DEFAULT ''",
	}
	tables := store.CoreTables()
	tables["sync_schema_meta"] = []store.CoreColumn{{Name: "id"}, {Name: "schema_version"}, {Name: "layouts", Added: true}}
	out := make(map[string][]coreColumn, len(tables))
	for t, cols := range tables {
		for _, c := range cols {
			out[t] = append(out[t], coreColumn{name: c.Name, add: added[t+"."+c.Name]})
		}
	}
	return out
}

var (
	coreTableRE    = regexp.MustCompile(`(?is)^CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)\s*\(`)
	coreIndexRE    = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+(\w+)\s+ON\s+(\w+)`)
	coreFunctionRE = regexp.MustCompile(`(?is)^CREATE\s+OR\s+REPLACE\s+FUNCTION\s+(\w+)\(\).*?\$\$(.*)\$\$`)
	coreTriggerRE  = regexp.MustCompile(`(?is)^CREATE\s+TRIGGER\s+(\w+)\s.*?\bON\s+(\w+)`)
)

// coreObjects parses the embedded migrations, in file name order, into
// their CREATE statements: a statement ends with a line that ends in ';'
// outside a dollar-quoted body.
func coreObjects() ([]coreObject, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	slices.Sort(names)
	var out []coreObject
	for _, name := range names {
		body, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		objects, err := parseCoreDDL(string(body))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, objects...)
	}
	return out, nil
}

// parseCoreDDL splits a migration file into its CREATE statements.
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
		if !strings.HasSuffix(trimmed, ";") || strings.Count(stmt, "$$")%2 != 0 {
			continue
		}
		cur = nil
		stmt = strings.TrimSuffix(stmt, ";")
		o, err := classifyCoreStatement(stmt)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("core DDL: unterminated statement %q", strings.Join(cur, "\n"))
	}
	return out, nil
}

func classifyCoreStatement(stmt string) (coreObject, error) {
	if m := coreTableRE.FindStringSubmatch(stmt); m != nil {
		return coreObject{kind: "table", name: m[1], table: m[1], sql: stmt}, nil
	}
	if m := coreIndexRE.FindStringSubmatch(stmt); m != nil {
		return coreObject{kind: "index", name: m[1], table: m[2], sql: stmt}, nil
	}
	if m := coreFunctionRE.FindStringSubmatch(stmt); m != nil {
		return coreObject{kind: "function", name: m[1], sql: stmt, body: collapseSpace(m[2])}, nil
	}
	if m := coreTriggerRE.FindStringSubmatch(stmt); m != nil {
		return coreObject{kind: "trigger", name: m[1], table: m[2], sql: stmt}, nil
	}
	return coreObject{}, fmt.Errorf("core DDL: unexpected statement %q", stmt)
}

// collapseSpace joins the words of s with single spaces.
func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// coreStep is one statement of a plan, with its description.
type coreStep struct {
	line string
	sql  string
	args []any
	// concurrently, when set, builds the step's index without the
	// migration locks (CREATE INDEX CONCURRENTLY, outside a transaction):
	// a plain index of a table that exists already, whose build under the
	// locks would hold every writer for as long as it reads the table.
	concurrently string
}

// stepLines are the descriptions of steps.
func stepLines(steps []coreStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.line
	}
	return out
}

func coreMismatch(details map[string]any) error {
	return &store.Error{Code: store.CodePhysicalLayoutMismatch,
		Message: "a core table of the database differs from the storage layout and cannot be migrated", Details: details}
}

// sqlCoreCatalog reads, in one statement, what the core DDL creates, as
// the running statements resolve the names (through the search_path):
// the relations ($1) with their kind and columns, the functions ($2, no
// arguments) with their body, and the triggers ($3 on the tables $4). It
// takes no lock on the relations.
const sqlCoreCatalog = `SELECT 'relation', n.name, c.relkind::text,
       array(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
  FROM unnest($1::text[]) AS n(name)
  JOIN pg_class c ON c.oid = to_regclass(quote_ident(n.name))
UNION ALL
SELECT 'function', f.name, '', ARRAY[p.prosrc]
  FROM unnest($2::text[]) AS f(name)
  JOIN pg_proc p ON p.oid = to_regprocedure(quote_ident(f.name) || '()')
UNION ALL
SELECT 'trigger', g.name, '', '{}'::text[]
  FROM unnest($3::text[], $4::text[]) AS g(name, tbl)
  JOIN pg_trigger t ON t.tgname = g.name AND t.tgrelid = to_regclass(quote_ident(g.tbl))`

// coreCatalog is what sqlCoreCatalog found.
type coreCatalog struct {
	relations map[string]coreRelation
	functions map[string]string // name → body, white space collapsed
	triggers  map[string]bool
}

type coreRelation struct {
	kind    string // pg_class.relkind
	columns []string
}

// readCoreCatalog reads the catalog for objects.
func readCoreCatalog(ctx context.Context, q querier, objects []coreObject) (coreCatalog, error) {
	var relations, functions, triggers, triggerTables []string
	for _, o := range objects {
		switch o.kind {
		case "table", "index":
			relations = append(relations, o.name)
		case "function":
			functions = append(functions, o.name)
		case "trigger":
			triggers, triggerTables = append(triggers, o.name), append(triggerTables, o.table)
		}
	}
	rows, err := q.Query(ctx, sqlCoreCatalog, relations, nonNilStrings(functions), nonNilStrings(triggers), nonNilStrings(triggerTables))
	if err != nil {
		return coreCatalog{}, fmt.Errorf("read catalog: %w", err)
	}
	cat := coreCatalog{relations: map[string]coreRelation{}, functions: map[string]string{}, triggers: map[string]bool{}}
	var (
		what, name, kind string
		info             []string
	)
	_, err = pgx.ForEachRow(rows, []any{&what, &name, &kind, &info}, func() error {
		switch what {
		case "relation":
			cat.relations[name] = coreRelation{kind: kind, columns: slices.Clone(info)}
		case "function":
			cat.functions[name] = collapseSpace(strings.Join(info, ""))
		case "trigger":
			cat.triggers[name] = true
		}
		return nil
	})
	if err != nil {
		return coreCatalog{}, fmt.Errorf("read catalog: %w", err)
	}
	return cat, nil
}

// planCore reads the catalog and returns the DDL that brings the core
// tables to the layout, in the migrations' order (a table's missing
// columns at its place, so before the indexes and the trigger); none when
// the database is at the layout. A core object it cannot bring there is a
// *store.Error. It only reads.
func planCore(ctx context.Context, q querier) ([]coreStep, error) {
	objects, err := coreObjects()
	if err != nil {
		return nil, err
	}
	cat, err := readCoreCatalog(ctx, q, objects)
	if err != nil {
		return nil, err
	}
	columns := coreColumns()
	var steps []coreStep
	for _, o := range objects {
		switch o.kind {
		case "table", "index":
			rel, exists := cat.relations[o.name]
			if !exists {
				step := coreStep{line: "create " + o.kind + " " + o.name, sql: o.sql}
				if _, tableExists := cat.relations[o.table]; o.kind == "index" && tableExists {
					step.concurrently = concurrentIndexSQL(o.sql)
				}
				steps = append(steps, step)
				continue
			}
			want := "r"
			if o.kind == "index" {
				want = "i"
			}
			if rel.kind != want && !(o.kind == "table" && rel.kind == "p") {
				return nil, coreMismatch(map[string]any{"table": o.table, "object": o.name, "reason": "object_type",
					"expected": o.kind, "actual": "relkind " + rel.kind})
			}
			if o.kind != "table" {
				continue
			}
			for _, col := range columns[o.name] {
				if slices.Contains(rel.columns, col.name) {
					continue
				}
				if col.add == "" {
					return nil, coreMismatch(map[string]any{"table": o.name, "column": col.name, "reason": "missing_column"})
				}
				steps = append(steps, coreStep{
					line: "add column " + o.name + "." + col.name,
					sql:  "ALTER TABLE " + quoteIdent(o.name) + " ADD COLUMN IF NOT EXISTS " + quoteIdent(col.name) + " " + col.add,
				})
			}
		case "function":
			body, exists := cat.functions[o.name]
			switch {
			case !exists:
				steps = append(steps, coreStep{line: "create function " + o.name + "()", sql: o.sql})
			case body != o.body:
				steps = append(steps, coreStep{line: "replace function " + o.name + "()", sql: o.sql})
			}
		case "trigger":
			if !cat.triggers[o.name] {
				steps = append(steps, coreStep{line: "create trigger " + o.name, sql: o.sql})
			}
		}
	}
	return steps, nil
}

// applySteps runs the statements of steps, in order: consecutive ones
// without arguments in one round trip (the simple protocol, which takes
// several statements).
func applySteps(ctx context.Context, tx pgx.Tx, steps []coreStep) error {
	var script []string
	flush := func() error {
		if len(script) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, strings.Join(script, ";\n"))
		script = nil
		return err
	}
	for _, s := range steps {
		if len(s.args) == 0 {
			script = append(script, s.sql)
			continue
		}
		if err := flush(); err != nil {
			return fmt.Errorf("apply %s: %w", strings.Join(stepLines(steps), ", "), err)
		}
		if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("apply %s: %w", s.line, err)
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("apply %s: %w", strings.Join(stepLines(steps), ", "), err)
	}
	return nil
}

// migrateCore brings the core tables to the layout: nothing at all when
// the catalog says they are there; otherwise, under the migration lock
// (lock.go), the steps that the catalog read again under the lock still
// calls for. It returns what it did.
func (s *Store) migrateCore(ctx context.Context) ([]string, error) {
	if err := s.dropAbandonedIndexes(ctx); err != nil {
		return nil, err
	}
	steps, err := planCore(ctx, s.pool)
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	built := s.buildIndexesConcurrently(ctx, steps)
	if len(built) > 0 {
		s.log.InfoContext(ctx, "pgstore: core indexes built concurrently", "steps", built)
		if steps, err = planCore(ctx, s.pool); err != nil || len(steps) == 0 {
			return built, err
		}
	}
	var done []string
	err = s.withMigrationLock(ctx, "core tables", func(ctx context.Context, tx pgx.Tx) error {
		steps, err := planCore(ctx, tx)
		if err != nil {
			return err
		}
		if err := applySteps(ctx, tx, steps); err != nil {
			return err
		}
		done = stepLines(steps)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(done) > 0 {
		s.log.InfoContext(ctx, "pgstore: core tables migrated", "steps", done)
	}
	return append(built, done...), nil
}

// concurrentIndexSQL returns the CREATE INDEX CONCURRENTLY form of a
// plain index's statement, or "" for a unique one (a concurrent build
// that fails on a duplicate leaves an invalid index behind).
func concurrentIndexSQL(stmt string) string {
	const plain = "CREATE INDEX IF NOT EXISTS "
	if !strings.HasPrefix(stmt, plain) {
		return ""
	}
	return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + strings.TrimPrefix(stmt, plain)
}

// sqlstateDuplicateTable is a concurrent build that met another
// process's build of the same index (as sqlstateUniqueViolation, on the
// catalog).
const sqlstateDuplicateTable = "42P07"

// buildIndexesConcurrently builds the indexes of steps that can be built
// without the migration locks (coreStep.concurrently), each in a
// statement of its own outside any transaction: the processes already
// running on the database keep writing while the table is read (a build
// waits for their open transactions, it does not hold them back). It
// returns the steps built. A build that fails is dropped again (a failed
// concurrent build leaves an invalid index) and left to the locked
// migration, which builds it as before.
func (s *Store) buildIndexesConcurrently(ctx context.Context, steps []coreStep) []string {
	var built []string
	for _, st := range steps {
		if st.concurrently == "" {
			continue
		}
		if !s.buildConcurrently(ctx, quoteIdent(strings.TrimPrefix(st.line, "create index ")), st.concurrently) {
			continue
		}
		built = append(built, st.line)
	}
	return built
}

// buildConcurrently runs stmt, a CREATE INDEX CONCURRENTLY of the index
// quoted (a statement of its own, outside any transaction), and reports
// whether it built the index. When another process builds the same index
// at the same moment, the build is left to it. A build that fails
// otherwise is dropped again (it leaves an invalid index behind) and left
// to the migration under the locks, which builds it as before.
//
// A unique index whose build meets a duplicate in the table's rows fails
// with a unique violation named by the index itself (another process's
// build of the same index collides on the catalog's names instead): it is
// dropped too, and the migration's own build reports the duplicate.
func (s *Store) buildConcurrently(ctx context.Context, quoted, stmt string) bool {
	_, err := s.pool.Exec(ctx, stmt)
	if err == nil {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == sqlstateDuplicateTable ||
		pgErr.Code == sqlstateUniqueViolation && quoteIdent(pgErr.ConstraintName) != quoted) {
		return false
	}
	s.log.WarnContext(ctx, "pgstore: concurrent index build failed; the migration builds it under its lock", "index", quoted, "err", err)
	if _, derr := s.pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+quoted); derr != nil {
		s.log.WarnContext(ctx, "pgstore: dropping the failed concurrent index build", "index", quoted, "err", derr)
	}
	return false
}

// sqlAbandonedIndexes lists the core indexes ($1) that are invalid and
// that no session is building: what a concurrent build leaves when its
// process dies during it. Postgres never uses such an index, and the
// catalog plan would take it for built.
const sqlAbandonedIndexes = `SELECT quote_ident(n.name) FROM unnest($1::text[]) AS n(name)
  JOIN pg_index i ON i.indexrelid = to_regclass(quote_ident(n.name))
  WHERE NOT i.indisvalid
    AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)`

// sqlAbandonedOwnedIndexes is sqlAbandonedIndexes for the owned (declared)
// indexes, named with the prefix $2, of the app tables $1.
const sqlAbandonedOwnedIndexes = `SELECT quote_ident(c.relname) FROM unnest($1::text[]) AS n(name)
  JOIN pg_index i ON i.indrelid = to_regclass(quote_ident(n.name))
  JOIN pg_class c ON c.oid = i.indexrelid
  WHERE starts_with(c.relname, $2) AND NOT i.indisvalid
    AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)`

// dropAbandonedIndexes drops the core indexes a concurrent build left
// invalid (sqlAbandonedIndexes), concurrently, so that the plan builds
// them again.
func (s *Store) dropAbandonedIndexes(ctx context.Context) error {
	objects, err := coreObjects()
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objects {
		if o.kind == "index" && concurrentIndexSQL(o.sql) != "" {
			names = append(names, o.name)
		}
	}
	return s.dropAbandoned(ctx, sqlAbandonedIndexes, names)
}

// dropAbandoned drops, concurrently, the indexes that query (with args)
// lists, quoted: invalid ones that no session is building.
func (s *Store) dropAbandoned(ctx context.Context, query string, args ...any) error {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("read invalid indexes: %w", err)
	}
	abandoned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read invalid indexes: %w", err)
	}
	for _, name := range abandoned {
		s.log.InfoContext(ctx, "pgstore: dropping an index an interrupted build left invalid", "index", name)
		if _, err := s.pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+name); err != nil {
			return fmt.Errorf("drop invalid index %s: %w", name, err)
		}
	}
	return nil
}
