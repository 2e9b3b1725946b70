package sqlitestore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// metaColumn is a storage-internal column of every app table, as createDDL
// declares it.
type metaColumn struct {
	name    string
	typ     string
	notNull bool
}

// metaColumns are the storage columns in createDDL order: the first two
// lead the table and are its primary key, the others follow the app
// columns.
var metaColumns = []metaColumn{
	{"_sync_partition", "TEXT", true},
	{"_sync_row_id", "TEXT", true},
	{"_sync_server_version", "INTEGER", true},
	{"_sync_scopes", "TEXT", true},
	{"_sync_payload", "BLOB", true},
	{"_sync_column_versions", "BLOB", false},
}

// physicalColumn is a column of a table as PRAGMA table_info reports it.
type physicalColumn struct {
	name    string
	typ     string
	notNull bool
	pk      int // 1-based position in the primary key, 0 outside it
}

// physicalColumns reads a table's columns; none when the table is missing.
func physicalColumns(c *conn, table string) ([]physicalColumn, error) {
	rows, err := c.query(`SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	defer rows.Close()
	var out []physicalColumn
	for rows.Next() {
		var col physicalColumn
		if err := rows.Scan(&col.name, &col.typ, &col.notNull, &col.pk); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", table, err)
		}
		out = append(out, col)
	}
	return out, rows.Err()
}

// expectedColumns are the columns the row store reads and writes.
func expectedColumns(t *schema.CompiledTable) []string {
	out := []string{metaColumns[0].name, metaColumns[1].name}
	if t.Materialize() {
		for _, c := range t.Columns() {
			out = append(out, c.Name)
		}
	}
	for _, m := range metaColumns[2:] {
		out = append(out, m.name)
	}
	return out
}

func physicalMismatch(details map[string]any) error {
	return &store.Error{Code: store.CodePhysicalLayoutMismatch, Message: "a database table differs from the storage layout", Details: details}
}

func nullability(notNull bool) string {
	if notNull {
		return "not_null"
	}
	return "nullable"
}

// checkPhysical compares a table with the storage layout ("Same-version
// storage readiness", §2.4): the table and every configured column must
// exist, the storage columns must have their declared type (compared
// case-insensitively) and nullability, and the primary key must be
// (_sync_partition, _sync_row_id). App-column types and nullability are
// the stored layout's business: columns a migration added are nullable in
// the database whatever the schema says. With upgradable, a missing
// _sync_column_versions (which Upgrade adds) is not a mismatch.
func checkPhysical(t *schema.CompiledTable, cols []physicalColumn, upgradable bool) error {
	if len(cols) == 0 {
		return physicalMismatch(map[string]any{"table": t.Name(), "reason": "missing_table"})
	}
	byName := make(map[string]physicalColumn, len(cols))
	for _, c := range cols {
		byName[c.name] = c
	}
	for _, name := range expectedColumns(t) {
		if _, ok := byName[name]; !ok && !(upgradable && name == columnVersionsColumn) {
			return physicalMismatch(map[string]any{"table": t.Name(), "column": name, "reason": "missing_column"})
		}
	}
	for _, m := range metaColumns {
		got, ok := byName[m.name]
		if !ok {
			continue // an upgradable column (the loop above refused the others)
		}
		if !strings.EqualFold(got.typ, m.typ) {
			return physicalMismatch(map[string]any{"table": t.Name(), "column": m.name, "reason": "type", "expected": m.typ, "actual": got.typ})
		}
		if got.notNull != m.notNull {
			return physicalMismatch(map[string]any{"table": t.Name(), "column": m.name, "reason": "nullability",
				"expected": nullability(m.notNull), "actual": nullability(got.notNull)})
		}
	}
	for _, c := range cols {
		want := 0
		switch c.name {
		case metaColumns[0].name:
			want = 1
		case metaColumns[1].name:
			want = 2
		}
		if c.pk != want {
			return physicalMismatch(map[string]any{"table": t.Name(), "column": c.name, "reason": "primary_key"})
		}
	}
	return nil
}

// checkPhysicalLayout checks every table of the schema; it writes nothing.
func checkPhysicalLayout(c *conn, cs *compiledSchema, upgradable bool) error {
	for _, t := range cs.schema.Tables() {
		cols, err := physicalColumns(c, t.Name())
		if err != nil {
			return err
		}
		if err := checkPhysical(t, cols, upgradable); err != nil {
			return err
		}
	}
	return nil
}

// migrate brings a database whose marker is older than cs (old is its
// stored layout; nil without a marker) to cs, on the writer's transaction:
// the append-only layout check, CREATE TABLE for new tables, ADD COLUMN
// for appended (always nullable) columns, the declared indexes, the
// rewrite of the stored rows and logged changes of the tables that grew,
// the marker, the declared checkpoints, and every partition's writer fence
// raised to the new version. The single writer runs nothing else
// meanwhile, so no write interleaves with the migration; any failure
// rolls all of it back.
//
// Tables of old that cs retires are left in place (they are outside the
// new marker, so nothing reads them); so are the push results, whose
// conflict rows keep the layout they were recorded with.
func migrate(c *conn, cs *compiledSchema, old schema.Layout, decls []store.CheckpointDeclaration, nowMs int64) error {
	sc := cs.schema
	if err := checkAppendOnly(old, sc); err != nil {
		return err
	}
	if err := c.exec(`CREATE TABLE IF NOT EXISTS sync_schema_meta(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_version INTEGER NOT NULL,
  layouts TEXT NOT NULL DEFAULT '{}')`); err != nil {
		return fmt.Errorf("create marker table: %w", err)
	}
	c.forget()
	backfill := map[string]bool{}
	for _, t := range sc.Tables() {
		ts := cs.tables[t.Name()]
		cols, err := physicalColumns(c, t.Name())
		if err != nil {
			return err
		}
		var ddl []string
		if len(cols) > 0 {
			have := make(map[string]bool, len(cols))
			for _, col := range cols {
				have[col.name] = true
			}
			if !have[columnVersionsColumn] {
				ddl = append(ddl, addColumnVersions(ts))
			}
			if t.Materialize() {
				stored, _ := old.Table(t.Name())
				for i, col := range t.Columns() {
					if have[col.Name] {
						continue
					}
					ddl = append(ddl, "ALTER TABLE "+ts.name+" ADD COLUMN "+quoteIdent(col.Name)+" "+sqliteType(col.Type))
					// A stored column without its typed column: the table
					// was not materialized; fill it from the payloads.
					backfill[t.Name()] = backfill[t.Name()] || i < len(stored)
				}
			}
			stale, _, err := ownedIndexes(c, ts)
			if err != nil {
				return err
			}
			for _, name := range stale {
				ddl = append(ddl, "DROP INDEX IF EXISTS "+quoteIdent(name))
			}
		}
		ddl = append(ddl, ts.createDDL()...)
		for _, stmt := range ddl {
			if err := c.exec(stmt); err != nil {
				return fmt.Errorf("migrate table %s: %w", t.Name(), err)
			}
		}
		c.forget()
	}
	for _, t := range sc.Tables() {
		if err := rewriteTable(c, cs.tables[t.Name()], old, backfill[t.Name()]); err != nil {
			return fmt.Errorf("rewrite table %s: %w", t.Name(), err)
		}
	}
	layout, err := sc.Layout().MarshalJSON()
	if err != nil {
		return err
	}
	if err := c.exec(`INSERT INTO sync_schema_meta(id, schema_version, layouts) VALUES (1, ?, ?)
ON CONFLICT(id) DO UPDATE SET schema_version=excluded.schema_version, layouts=excluded.layouts`, sc.Version(), string(layout)); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	for _, d := range decls {
		if err := installCheckpoint(c, d, nowMs); err != nil {
			return err
		}
	}
	return raiseAllFences(c, sc.Version())
}

// ownedIndexes reads the server-owned indexes (named with
// schema.IndexPrefix) of the table: stale are those that are not declared,
// or are declared differently (the reference before 0.21 did not lead
// them with _sync_partition), present all of them by name; createDDL
// creates the missing ones.
func ownedIndexes(c *conn, ts *tableSQL) (stale []string, present map[string]bool, err error) {
	type index struct {
		unique  bool
		columns string
	}
	declared := map[string]index{}
	if ts.t.Materialize() {
		for _, ix := range ts.t.Indexes() {
			declared[ix.PhysicalName] = index{ix.Unique, strings.Join(append([]string{"_sync_partition"}, ix.Columns...), "\x00")}
		}
	}
	rows, err := c.query(`SELECT l.name, l."unique",
  (SELECT group_concat(name, char(0)) FROM (SELECT name FROM pragma_index_info(l.name) ORDER BY seqno))
FROM pragma_index_list(?) l WHERE substr(l.name, 1, length(?)) = ?`, ts.t.Name(), schema.IndexPrefix, schema.IndexPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("read indexes of %s: %w", ts.t.Name(), err)
	}
	defer rows.Close()
	present = map[string]bool{}
	for rows.Next() {
		var name string
		var ix index
		if err := rows.Scan(&name, &ix.unique, &ix.columns); err != nil {
			return nil, nil, fmt.Errorf("read indexes of %s: %w", ts.t.Name(), err)
		}
		present[name] = true
		if want, ok := declared[name]; !ok || want != ix {
			stale = append(stale, name)
		}
	}
	return stale, present, rows.Err()
}

// columnVersionsColumn is the per-column version record of an app table,
// which the reference before 0.21 did not have (wire version 3 needs it).
const columnVersionsColumn = "_sync_column_versions"

func addColumnVersions(ts *tableSQL) string {
	return "ALTER TABLE " + ts.name + " ADD COLUMN " + columnVersionsColumn + " BLOB"
}

// planUpgrade returns what Upgrade does to the existing app tables of cs
// (a database the reference 0.15 to 0.20 line wrote): the missing
// _sync_column_versions column (NULL: every column at the row's version),
// and the declared indexes rebuilt in the storage's shape (led by
// _sync_partition, so unique per partition) or created. Nothing is
// rewritten: rows, payloads, the log and the cursors stay as they are.
// Tables that do not exist are not its business (EnsureSchema creates
// them, or refuses). It only reads.
func planUpgrade(c *conn, cs *compiledSchema) ([]ddlStep, error) {
	var steps []ddlStep
	for _, t := range cs.schema.Tables() {
		ts := cs.tables[t.Name()]
		cols, err := physicalColumns(c, t.Name())
		if err != nil {
			return nil, err
		}
		if len(cols) == 0 {
			continue
		}
		if !slices.ContainsFunc(cols, func(col physicalColumn) bool { return col.name == columnVersionsColumn }) {
			steps = append(steps, ddlStep{line: "add column " + t.Name() + "." + columnVersionsColumn, sql: addColumnVersions(ts)})
		}
		if !t.Materialize() {
			continue
		}
		stale, present, err := ownedIndexes(c, ts)
		if err != nil {
			return nil, err
		}
		create := ts.createDDL()[1:] // the CREATE INDEX statements, in declaration order
		for i, ix := range t.Indexes() {
			switch {
			case slices.Contains(stale, ix.PhysicalName):
				steps = append(steps, ddlStep{line: "rebuild index " + ix.PhysicalName + " on " + t.Name(),
					sql: "DROP INDEX " + quoteIdent(ix.PhysicalName) + ";\n" + create[i]})
			case !present[ix.PhysicalName]:
				steps = append(steps, ddlStep{line: "create index " + ix.PhysicalName + " on " + t.Name(), sql: create[i]})
			}
		}
	}
	return steps, nil
}

// rewriteBatch is the number of rows a migration reads per page.
const rewriteBatch = 500

// rewriteTable re-encodes the stored payloads of a table whose layout grew
// (decoding with the stored layout, appending NULLs) with its logged
// changes, and refreshes the typed columns of a materialized table from
// the payloads when they grew or were missing. A table needing neither is
// left alone.
func rewriteTable(c *conn, ts *tableSQL, old schema.Layout, backfill bool) error {
	t := ts.t
	stored, ok := old.Table(t.Name())
	if !ok {
		return nil // a new table
	}
	grew := len(stored) < len(t.Columns())
	if !grew && !backfill {
		return nil
	}
	decode := t.RowCodec()
	if grew {
		wc := make([]wire.Column, len(stored))
		for i, col := range stored {
			wc[i] = wire.Column{Name: col.Name, Type: col.Type, Nullable: col.Nullable}
		}
		var err error
		if decode, err = wire.NewRowCodec(wc, t.Columns()[t.PrimaryKey()].Name); err != nil {
			return fmt.Errorf("stored layout: %w", err)
		}
	}
	reencode := func(payload []byte) ([]byte, []wire.Value, error) {
		vals, err := decode.DecodeRow(payload)
		if err != nil {
			return nil, nil, fmt.Errorf("decode stored row: %w", err)
		}
		for len(vals) < len(t.Columns()) {
			vals = append(vals, wire.Value{Null: true})
		}
		out, err := t.RowCodec().AppendRow(nil, vals)
		if err != nil {
			return nil, nil, fmt.Errorf("encode row: %w", err)
		}
		return out, vals, nil
	}
	if err := rewriteRows(c, ts, reencode); err != nil {
		return err
	}
	if grew {
		return rewriteChanges(c, t.Name(), reencode)
	}
	return nil
}

type reencodeFunc func(payload []byte) ([]byte, []wire.Value, error)

func rewriteRows(c *conn, ts *tableSQL, reencode reencodeFunc) error {
	sets := []string{"_sync_payload=?"}
	if ts.t.Materialize() {
		for _, col := range ts.t.Columns() {
			sets = append(sets, quoteIdent(col.Name)+"=?")
		}
	}
	update := "UPDATE " + ts.name + " SET " + strings.Join(sets, ", ") + " WHERE _sync_partition=? AND _sync_row_id=?"
	order := fmt.Sprintf(" ORDER BY _sync_partition, _sync_row_id LIMIT %d", rewriteBatch)
	first := "SELECT _sync_partition, _sync_row_id, _sync_payload FROM " + ts.name + order
	next := "SELECT _sync_partition, _sync_row_id, _sync_payload FROM " + ts.name + " WHERE (_sync_partition, _sync_row_id) > (?, ?)" + order
	type row struct {
		partition, rowID string
		payload          []byte
	}
	var last *row
	for {
		query, args := first, []any(nil)
		if last != nil {
			query, args = next, []any{last.partition, last.rowID}
		}
		rows, err := c.query(query, args...)
		if err != nil {
			return err
		}
		var page []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.partition, &r.rowID, &r.payload); err != nil {
				rows.Close()
				return err
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range page {
			payload, vals, err := reencode(r.payload)
			if err != nil {
				return fmt.Errorf("row %q: %w", r.rowID, err)
			}
			args := []any{payload}
			if ts.t.Materialize() {
				for i, col := range ts.t.Columns() {
					args = append(args, sqlValue(col.Type, vals[i]))
				}
			}
			if err := c.exec(update, append(args, r.partition, r.rowID)...); err != nil {
				return err
			}
		}
		if len(page) < rewriteBatch {
			return nil
		}
		last = &page[len(page)-1]
	}
}

// rewriteChanges re-encodes the logged upserts of a table: the pull and
// the realtime fan-out serve them verbatim, so they must be in the layout
// the running server's clients decode.
func rewriteChanges(c *conn, table string, reencode reencodeFunc) error {
	type change struct {
		partition  string
		seq, index int64
		payload    []byte
	}
	pageQuery := fmt.Sprintf(`SELECT partition, commit_seq, idx, payload FROM sync_changes
WHERE (partition, commit_seq, idx) > (?, ?, ?) AND tbl=? AND payload IS NOT NULL
ORDER BY partition, commit_seq, idx LIMIT %d`, rewriteBatch)
	last := change{seq: -1, index: -1}
	for {
		rows, err := c.query(pageQuery, last.partition, last.seq, last.index, table)
		if err != nil {
			return err
		}
		var page []change
		for rows.Next() {
			var ch change
			if err := rows.Scan(&ch.partition, &ch.seq, &ch.index, &ch.payload); err != nil {
				rows.Close()
				return err
			}
			page = append(page, ch)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, ch := range page {
			payload, _, err := reencode(ch.payload)
			if err != nil {
				return fmt.Errorf("change %d/%d: %w", ch.seq, ch.index, err)
			}
			if err := c.exec("UPDATE sync_changes SET payload=? WHERE partition=? AND commit_seq=? AND idx=?",
				payload, ch.partition, ch.seq, ch.index); err != nil {
				return err
			}
		}
		if len(page) < rewriteBatch {
			return nil
		}
		last = page[len(page)-1]
	}
}
