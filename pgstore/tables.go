package pgstore

import (
	"fmt"
	"math"
	"strings"

	"github.com/syncgo/syncgo/internal/jsonb"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The meta columns of every app table, as the reference server names them.
const (
	colPartition      = "_sync_partition"
	colRowID          = "_sync_row_id"
	colServerVersion  = "_sync_server_version"
	colScopes         = "_sync_scopes"
	colPayload        = "_sync_payload"
	colColumnVersions = "_sync_column_versions"
)

// schemaState is what EnsureSchema installs: the running schema and the
// SQL of its tables, generated once.
type schemaState struct {
	compiled *schema.Compiled
	version  int32
	tables   map[string]*tableSQL
}

func newSchemaState(c *schema.Compiled) *schemaState {
	st := &schemaState{compiled: c, version: c.Version(), tables: make(map[string]*tableSQL, len(c.Tables()))}
	for _, t := range c.Tables() {
		st.tables[t.Name()] = newTableSQL(t)
	}
	return st
}

func (st *schemaState) table(name string) (*tableSQL, error) {
	t, ok := st.tables[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrUnknownTable, name)
	}
	return t, nil
}

// tableSQL is one app table with its statements.
type tableSQL struct {
	t      *schema.CompiledTable
	name   string
	quoted string
	// typed are the materialized app columns, in codec order; empty when
	// the table is not materialized.
	typed []schema.Column
	// constraints maps the physical name of a declared unique index to its
	// declared name.
	constraints map[string]string

	upsert    string
	selectRow string
	deleteRow string
	// writeRow is upsert with the row's scope index entries brought to
	// its scopes, in one statement ($n+1 the table's name, $n+2 and $n+3
	// the scope variables and values); dropRow is deleteRow with the row's
	// entries ($3 the table's name).
	writeRow string
	dropRow  string
	// writeRows is writeRow for several rows (coalesce.go): $1 the
	// partition, $2 the table's name, $3 the row ids, one array per typed
	// column, the meta columns' arrays, then the scope index entries as
	// three arrays (row id, variable, value). Used only when rowsBatch.
	writeRows string
	// rowsBatch: the stored typed columns have the types writeRows binds
	// (sqlType), so an upsert of the table may join a coalesced tail.
	rowsBatch bool
	// selectRows reads the rows of a list of ids ($2).
	selectRows string
	scanFirst  string
	scanAfter  string
	// scanFirstOne and scanAfterOne are the scans of a single key: no
	// other keys to check on each row.
	scanFirstOne string
	scanAfterOne string
	// scanFirstValue and scanAfterValue are the scans of a single key
	// with a single value: its index range is already in row-id order,
	// so the merge of the values (an ORDER BY over the page) is left out.
	scanFirstValue string
	scanAfterValue string
	// ordered is whether the scans join the table under "C", by its
	// primary key or its order index (order_index.go), rather than by its
	// primary key in the database collation.
	ordered bool
	// scanDenseFirst and scanDenseAfter are the dense scans of a single
	// value of an ordered table (scanDenseSQL), without and with the
	// scopes column (index 1); empty when not ordered.
	scanDenseFirst [2]string
	scanDenseAfter [2]string
	// scanTableFirst and scanTableAfter walk an ordered table's rows in
	// key order, each marked with whether its scopes hold one value
	// (scanTableSQL): the bootstrap pages' read (VisitRows); empty when
	// not ordered.
	scanTableFirst string
	scanTableAfter string
	listFirst      string
	listAfter      string
}

// rowColumns are the columns a read returns, in scanRow order.
const rowColumns = `"_sync_row_id", "_sync_server_version", "_sync_scopes", "_sync_payload", "_sync_column_versions"`

func newTableSQL(t *schema.CompiledTable) *tableSQL {
	ts := &tableSQL{t: t, name: t.Name(), quoted: quoteIdent(t.Name()), constraints: map[string]string{}}
	if t.Materialize() {
		ts.typed = t.Columns()
	}
	for _, ix := range t.Indexes() {
		if ix.Unique {
			ts.constraints[ix.PhysicalName] = ix.Name
		}
	}
	names := []string{colPartition, colRowID}
	for _, c := range ts.typed {
		names = append(names, c.Name)
	}
	names = append(names, colServerVersion, colScopes, colPayload, colColumnVersions)
	quoted := make([]string, len(names))
	params := make([]string, len(names))
	var sets []string
	for i, n := range names {
		quoted[i] = quoteIdent(n)
		params[i] = fmt.Sprintf("$%d", i+1)
		if i >= 2 {
			sets = append(sets, quoted[i]+" = EXCLUDED."+quoted[i])
		}
	}
	key := quoteIdent(colPartition) + " = $1 AND " + quoteIdent(colRowID) + " = $2"
	ts.upsert = "INSERT INTO " + ts.quoted + " (" + strings.Join(quoted, ", ") + ") VALUES (" + strings.Join(params, ", ") +
		") ON CONFLICT (" + quoteIdent(colPartition) + ", " + quoteIdent(colRowID) + ") DO UPDATE SET " + strings.Join(sets, ", ")
	ts.selectRow = "SELECT " + rowColumns + " FROM " + ts.quoted + " WHERE " + key
	ts.deleteRow = "DELETE FROM " + ts.quoted + " WHERE " + key
	// A primary-key probe per id, whatever the table's statistics.
	ts.selectRows = "SELECT r.* FROM unnest($2::text[]) AS k(id) CROSS JOIN LATERAL (SELECT " + rowColumns + " FROM " + ts.quoted +
		" WHERE " + quoteIdent(colPartition) + " = $1 AND " + quoteIdent(colRowID) + " = k.id LIMIT 1) r"
	// The statements of a row's scope index entries find them through
	// sync_row_scopes_by_row (row_id in the default collation, see
	// migrations/006). The upsert's prune and insert touch disjoint entries
	// (those not in the new scopes, and those in them), so one statement
	// carries the three: its parts share one snapshot.
	n := len(names)
	tbl, vars, values := fmt.Sprintf("$%d", n+1), fmt.Sprintf("$%d::text[]", n+2), fmt.Sprintf("$%d::text[]", n+3)
	ts.writeRow = "WITH up AS (" + ts.upsert + "), gone AS (DELETE FROM sync_row_scopes WHERE partition = $1 AND tbl = " + tbl +
		` AND row_id COLLATE "default" = $2 AND (var, value) NOT IN (SELECT * FROM unnest(` + vars + ", " + values + ")))\n" +
		"INSERT INTO sync_row_scopes(partition, tbl, var, value, row_id) SELECT $1, " + tbl + ", s.var, s.value, $2 FROM unnest(" +
		vars + ", " + values + ") AS s(var, value) ON CONFLICT DO NOTHING"
	ts.writeRows = writeRowsSQL(ts, names)
	ts.dropRow = `WITH gone AS (DELETE FROM sync_row_scopes WHERE partition = $1 AND tbl = $3 AND row_id COLLATE "default" = $2)
` + ts.deleteRow
	// A listing orders by row id bytewise, as scans do; the primary key is
	// in the database collation, so a page sorts the partition's rows
	// after the cursor (an operator read, not a serving path).
	list := "SELECT " + rowColumns + " FROM " + ts.quoted + " WHERE " + quoteIdent(colPartition) + " = $1"
	order := " ORDER BY " + quoteIdent(colRowID) + ` COLLATE "C" LIMIT $2`
	ts.listFirst = list + order
	ts.listAfter = list + " AND " + quoteIdent(colRowID) + ` COLLATE "C" > $3` + order
	ts.setScans(unordered)
	return ts
}

// setScans generates the scans, joining the app table under "C" (ordered)
// or under the database collation.
func (ts *tableSQL) setScans(kind orderKind) {
	ts.ordered = kind != unordered
	ts.scanFirst = scanSQL(ts.quoted, false, true, true, kind)
	ts.scanAfter = scanSQL(ts.quoted, true, true, true, kind)
	ts.scanFirstOne = scanSQL(ts.quoted, false, false, true, kind)
	ts.scanAfterOne = scanSQL(ts.quoted, true, false, true, kind)
	ts.scanFirstValue = scanSQL(ts.quoted, false, false, false, kind)
	ts.scanAfterValue = scanSQL(ts.quoted, true, false, false, kind)
	ts.scanDenseFirst, ts.scanDenseAfter = [2]string{}, [2]string{}
	ts.scanTableFirst, ts.scanTableAfter = "", ""
	if ts.ordered {
		ts.scanTableFirst, ts.scanTableAfter = scanTableSQL(ts.quoted, false), scanTableSQL(ts.quoted, true)
		for i, scopes := range []bool{false, true} {
			ts.scanDenseFirst[i] = scanDenseSQL(ts.quoted, false, scopes)
			ts.scanDenseAfter[i] = scanDenseSQL(ts.quoted, true, scopes)
		}
	}
}

// useOrder switches the scans to the dense scan and the probing join, for
// a table the catalog shows ordered; before the table's statements are published
// (EnsureSchemaWith), never after.
func (ts *tableSQL) useOrder(kind orderKind) { ts.setScans(kind) }

// writeRowsSQL is writeRow for several rows of one table, each at most
// once: the rows come as one array per column, their scope index entries
// as three arrays. An entry of one of the rows that is not among its new
// entries is deleted; the new ones are inserted.
//
// The entries of each row are found by a lookup of sync_row_scopes_by_row
// per row id: OFFSET 0 keeps the planner from flattening the lateral
// lookup into a join, which on a table without statistics it plans as a
// hash of every entry of the partition's table; the delete then finds the
// entries by their ctid.
func writeRowsSQL(ts *tableSQL, names []string) string {
	var (
		arrays, aliases, selects, quoted, sets []string
	)
	n := 3
	param := func(typ string) string {
		p := fmt.Sprintf("$%d::%s[]", n, typ)
		n++
		return p
	}
	for i, name := range names[1:] {
		alias := fmt.Sprintf("c%d", i)
		typ, cast := "text", ""
		switch {
		case i == 0: // _sync_row_id
		case i <= len(ts.typed):
			typ = sqlType(ts.typed[i-1].Type)
			if typ == "JSONB" {
				typ, cast = "text", "::jsonb"
			}
		case name == colServerVersion:
			typ = "int8"
		case name == colScopes:
			cast = "::jsonb"
		default: // payload, column versions
			typ = "bytea"
		}
		arrays = append(arrays, param(typ))
		aliases = append(aliases, alias)
		selects = append(selects, "v."+alias+cast)
		quoted = append(quoted, quoteIdent(name))
		if i > 0 {
			sets = append(sets, quoteIdent(name)+" = EXCLUDED."+quoteIdent(name))
		}
	}
	sRow, sVar, sValue := param("text"), param("text"), param("text")
	entries := "unnest(" + sRow + ", " + sVar + ", " + sValue + ") AS e(row_id, var, value)"
	return "WITH up AS (INSERT INTO " + ts.quoted + " (" + quoteIdent(colPartition) + ", " + strings.Join(quoted, ", ") + ")\n" +
		"  SELECT $1, " + strings.Join(selects, ", ") + " FROM unnest(" + strings.Join(arrays, ", ") + ") AS v(" + strings.Join(aliases, ", ") + ")\n" +
		"  ON CONFLICT (" + quoteIdent(colPartition) + ", " + quoteIdent(colRowID) + ") DO UPDATE SET " + strings.Join(sets, ", ") + "),\n" +
		"gone AS (DELETE FROM sync_row_scopes d USING unnest($3::text[]) AS r(row_id)\n" +
		"  CROSS JOIN LATERAL (SELECT s.ctid, s.var, s.value FROM sync_row_scopes s\n" +
		"    WHERE s.partition = $1 AND s.tbl = $2 AND s.row_id COLLATE \"default\" = r.row_id OFFSET 0) x\n" +
		"  WHERE d.ctid = x.ctid AND NOT EXISTS (SELECT 1 FROM " + entries + " WHERE e.row_id = r.row_id AND e.var = x.var AND e.value = x.value))\n" + "INSERT INTO sync_row_scopes(partition, tbl, var, value, row_id) SELECT $1, $2, e.var, e.value, e.row_id FROM " + entries + " ON CONFLICT DO NOTHING"
}

// scanSQL is the row scan of a table: candidates from sync_row_scopes on
// the first key, one ordered, limited range per value, each checked
// against the other keys on the row's _sync_scopes (in either JSON form,
// see json.go); then the first $6 of them in bytewise row-id order.
// Parameters: partition, table, values of the first key, the first key,
// the other keys as a JSONB object of value arrays, limit, and with after
// the row id to start after.
//
// Row ids compare with COLLATE "C" (bytewise for UTF-8): the order of the
// contract, whatever the database collation. sync_row_scopes.row_id is
// declared COLLATE "C", so the range and the order come from its primary
// key. The join to the app table compares under the collation of its
// primary key ("default"), or Postgres, seeing two collations, could not
// use that key and would filter the partition's rows instead. An ordered
// table (order_index.go: its primary key under "C", or an order index) is
// probed by a lateral lookup of one row, which Postgres cannot turn into a
// merge join: walking the table's key between every two rows of a sparse
// value would read the whole partition (a 600-row value of 100,000 rows,
// 30,000 rows estimated: 51-154 ms against a few ms). The dense reads of a
// single value go through scanDenseSQL.
//
// Without others (a single key) the per-row check of the other keys is
// left out: $5 is then only tested once for NULL (it is never NULL), which
// keeps the parameters the same.
//
// Without merge ($3 holds one value) the outer ORDER BY is left out: the
// lateral range of the one value is ordered and limited, and a sort of
// the page by Postgres would only cost it time (about a fifth of a
// 10,000-row page's execution). The order the rows arrive in is checked
// by the reader (collectScanRows), which sorts a page that is not.
func scanSQL(table string, after, others, merge bool, kind orderKind) string {
	rid := "s.row_id COLLATE \"C\""
	cond := ""
	if after {
		cond = " AND " + rid + " > $7"
	}
	// The app table is joined under its key's collation. An ordered
	// table is probed once per entry by a lateral lookup (LIMIT 1 keeps
	// Postgres from a merge join, which for a sparse value would read the
	// table's key between every two of its rows: the dense reads go
	// through scanDenseSQL instead).
	from := `sync_row_scopes s
      JOIN ` + table + ` t ON t.` + quoteIdent(colPartition) + ` = s.partition
                          AND t.` + quoteIdent(colRowID) + ` = s.row_id COLLATE "default"`
	if kind != unordered {
		// By the primary key, in its collation (equality is the same).
		// (sync_row_scopes.row_id may be in a linguistic collation
		// on a database the reference server created: always explicit.)
		coll := ` COLLATE "default"`
		if kind == orderKey {
			coll = ` COLLATE "C"`
		}
		from = `sync_row_scopes s
      CROSS JOIN LATERAL (SELECT * FROM ` + table + ` t0
                           WHERE t0.` + quoteIdent(colPartition) + ` = s.partition
                             AND t0.` + quoteIdent(colRowID) + ` = s.row_id` + coll + ` LIMIT 1) t`
	}
	check := `
       AND NOT EXISTS (SELECT 1 FROM jsonb_each($5::jsonb) f
                        WHERE NOT coalesce(f.value ? ` + sqlJSONKey("t."+quoteIdent(colScopes), "f.key") + `, FALSE))`
	if !others {
		check = `
       AND $5::jsonb IS NOT NULL`
	}
	outer := ""
	if merge {
		outer = `
 ORDER BY r.row_id COLLATE "C"
 LIMIT $6`
	}
	return `SELECT r.row_id, r.server_version, r.scopes, r.payload, r.column_versions
  FROM unnest($3::text[]) AS v(value)
  CROSS JOIN LATERAL (
    SELECT t.` + quoteIdent(colRowID) + ` AS row_id, t.` + quoteIdent(colServerVersion) + ` AS server_version,
           t.` + quoteIdent(colScopes) + ` AS scopes, t.` + quoteIdent(colPayload) + ` AS payload,
           t.` + quoteIdent(colColumnVersions) + ` AS column_versions
      FROM ` + from + `
     WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $4 AND s.value = v.value` + cond + check + `
     ORDER BY ` + rid + `
     LIMIT $6) r` + outer
}

// scanDenseSQL is the scan of one value of one key of an ordered table
// (order_index.go): the page's entries of the row scope key (p, row ids
// only, returned with server_version -1) and then, in the same bytewise
// order, as many rows of the table from the first entry on as there are
// entries and denseSlack more (the window, sized by the entries, not by
// the limit: a value of 10 rows reads 74 rows of the table, not 10,064).
// The two ranges come back one after the other (UNION ALL: one
// statement, one snapshot) and the reader walks them side by side
// (zipDense): when the value is dense (its rows are most of the table's
// in the range) every entry finds its row in the window and the page is
// done; when one does not, the caller reads the page by the probing scan
// instead (ScanRows). So the table is read in key order, as SQLite's
// dense walk does, and a sparse page costs at most a window of its own
// size more. Joining the two ranges in Postgres (a merge join of the
// entries, sorted again, with the window, materialized) cost its backend
// about twice the two ranges' own reads. With scopes the window also
// returns the scopes column (a jsonb turned into text per row: left out
// when the caller does not read it). The window starts at p's first
// entry, which is its least as p holds them in the order it read them
// (min() over p compared every entry again: 7 % of a 10,000-row page's
// backend time); were it not the least, an entry would miss its row in
// the window and the reader would fall back as above. Parameters as
// scanSQL's.
func scanDenseSQL(table string, after, scopes bool) string {
	cond, tcond := "", ""
	if after {
		cond = ` AND s.row_id COLLATE "C" > $7`
		tcond = ` AND t.` + quoteIdent(colRowID) + ` COLLATE "C" > $7`
	}
	scopesCol := `NULL::jsonb`
	if scopes {
		scopesCol = `t.` + quoteIdent(colScopes)
	}
	return `WITH p AS MATERIALIZED (
  SELECT s.row_id COLLATE "C" AS row_id FROM sync_row_scopes s
   WHERE s.partition = $1 AND s.tbl = $2 AND s.var = $4 AND s.value = ($3::text[])[1]` + cond + `
     AND $5::jsonb IS NOT NULL
   ORDER BY s.row_id COLLATE "C"
   LIMIT $6)
SELECT p.row_id, -1::bigint, NULL::jsonb, NULL::bytea, NULL::bytea FROM p
UNION ALL (
  SELECT t.` + quoteIdent(colRowID) + ` COLLATE "C", t.` + quoteIdent(colServerVersion) + `, ` + scopesCol + `,
         t.` + quoteIdent(colPayload) + `, t.` + quoteIdent(colColumnVersions) + `
    FROM ` + table + ` t
   WHERE t.` + quoteIdent(colPartition) + ` = $1` + tcond + `
     AND t.` + quoteIdent(colRowID) + ` COLLATE "C" >= (SELECT p.row_id FROM p LIMIT 1)
   ORDER BY t.` + quoteIdent(colRowID) + ` COLLATE "C"
   LIMIT (SELECT count(*) FROM p) + ` + fmt.Sprint(denseSlack) + `)`
}

// scanTableSQL is the walk of an ordered table (order_index.go) for a
// page of one value of one key: the partition's rows in bytewise row-id
// order, after $6 with after, at most $4 and denseSlack more, each with
// whether its own stored scopes give key $2 the value $3 (in either JSON
// form, sqlJSONKey); the payload and column versions only of the rows
// that do.
// The reader (visitTableRows) takes the rows of the value and gives up,
// for the probing scan, once more than denseSlack others came between
// them (a sparse value). A row's scope index entries are written from
// its stored scopes in the same statement (writeRow, writeRowsSQL), so
// the two agree and the page needs no entries: reading them beside the
// rows (the dense scan, scanDenseSQL) made a 10,000-row page's execution
// 11.8 ms against the walk's 4.8 in psql (100,000 rows of one value).
// The walk starts at the value's first row id in its index entries (one
// probe), as the dense scan's window does: a value whose rows sit
// together in a large partition is walked from there, not from the
// partition's first row. The limit is a sub-select so that a custom
// plan, on a table whose statistics say it is small (a fresh seed),
// still walks the key rather than sorting a bitmap scan's rows (33
// against 6.6 ms). Parameters: partition, key, value, limit, table, and
// with after the row id to start after.
func scanTableSQL(table string, after bool) string {
	cond, scond := "", ""
	if after {
		cond = ` AND t.` + quoteIdent(colRowID) + ` COLLATE "C" > $6`
		scond = ` AND s.row_id COLLATE "C" > $6`
	}
	scopes := "t." + quoteIdent(colScopes)
	return `SELECT t.` + quoteIdent(colRowID) + ` COLLATE "C", t.` + quoteIdent(colServerVersion) + `, x.m,
       CASE WHEN x.m THEN t.` + quoteIdent(colPayload) + ` END, CASE WHEN x.m THEN t.` + quoteIdent(colColumnVersions) + ` END
  FROM ` + table + ` t
  CROSS JOIN LATERAL (SELECT coalesce(` + sqlJSONKey(scopes, "$2::text") + ` = $3::text, FALSE) AS m) x
 WHERE t.` + quoteIdent(colPartition) + ` = $1` + cond + `
   AND t.` + quoteIdent(colRowID) + ` COLLATE "C" >= (SELECT s.row_id FROM sync_row_scopes s
        WHERE s.partition = $1 AND s.tbl = $5 AND s.var = $2 AND s.value = $3` + scond + `
        ORDER BY s.row_id COLLATE "C" LIMIT 1)
 ORDER BY t.` + quoteIdent(colRowID) + ` COLLATE "C"
 LIMIT (SELECT $4::bigint + ` + fmt.Sprint(denseSlack) + `)`
}

// denseSlack is how many rows of the table outside the value a dense scan
// page may pass over (scanDenseSQL, scanTableSQL).
const denseSlack = 64

// quoteIdent quotes an SQL identifier.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// sqlType is the Postgres type of a materialized column of type t.
func sqlType(t wire.ColumnType) string {
	switch t {
	case wire.TypeJSON:
		return "JSONB"
	case wire.TypeInteger:
		return "BIGINT"
	case wire.TypeFloat:
		return "DOUBLE PRECISION"
	case wire.TypeBoolean:
		return "BOOLEAN"
	case wire.TypeBytes, wire.TypeCRDT:
		return "BYTEA"
	default: // string, blob_ref
		return "TEXT"
	}
}

// typedArgs returns the bind values of the typed columns of a row. The
// typed columns are a queryable projection: the payload is the source of
// truth, so a value that Postgres cannot hold (a NUL character in TEXT;
// in JSONB a \u0000 escape, a lone surrogate's escape or a number outside
// numeric's range: jsonb.Holds) is projected as NULL rather than refusing
// the row, which would fail the commit, and every commit grouped with it,
// again on every retry; the reference server does the same for JSON it
// cannot parse. A NaN float is projected as NULL too, as SQLite's REAL
// stores it, so that both drivers' projections agree.
func (ts *tableSQL) typedArgs(vals []wire.Value) ([]any, error) {
	if len(vals) != len(ts.typed) {
		return nil, fmt.Errorf("table %q: row has %d values for %d columns", ts.name, len(vals), len(ts.typed))
	}
	out := make([]any, len(vals))
	for i, c := range ts.typed {
		out[i] = projectValue(c.Type, vals[i])
	}
	return out, nil
}

// projectValue is the bind value of v in a typed column of type t; nil
// (NULL) for NULL and for what the column cannot hold.
func projectValue(t wire.ColumnType, v wire.Value) any {
	if v.Null {
		return nil
	}
	switch t {
	case wire.TypeInteger:
		return v.Int
	case wire.TypeFloat:
		if math.IsNaN(v.Float) {
			return nil
		}
		return v.Float
	case wire.TypeBoolean:
		return v.Bool
	case wire.TypeBytes, wire.TypeCRDT:
		return nonNilBytes(v.Bytes)
	case wire.TypeJSON:
		if !jsonb.Holds(v.Str) {
			return nil
		}
	default:
		if strings.ContainsRune(v.Str, 0) {
			return nil
		}
	}
	return v.Str
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// nullIfEmpty stores an empty byte string as NULL.
func nullIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
