package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// migrateSchema creates or migrates the app tables to c and writes the
// marker, in one transaction whose first statement is the migration lock.
func (s *Store) migrateSchema(ctx context.Context, c *schema.Compiled) error {
	layout, err := c.Layout().MarshalJSON()
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockForMigration); err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		m, err := readMarker(tx.QueryRow(ctx, sqlMarkerLocked))
		found := err == nil
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if found && m.SchemaVersion >= c.Version() {
			return checkSchema(ctx, tx, c, m) // migrated by another server meanwhile
		}
		if found {
			if err := schema.CheckAppendOnly(m.Layout, c.Layout()); err != nil {
				return &store.Error{
					Code:    store.CodeSchemaMigrationPending,
					Message: "the stored layout cannot be migrated by appending nullable columns",
					Details: map[string]any{"storedSchemaVersion": m.SchemaVersion, "runningSchemaVersion": c.Version()},
					Err:     err,
				}
			}
		}
		cols, err := physicalColumns(ctx, tx, c)
		if err != nil {
			return err
		}
		ddl, err := schemaDDL(ctx, tx, c, cols)
		if err != nil {
			return err
		}
		if len(ddl) > 0 {
			if _, err := tx.Exec(ctx, strings.Join(ddl, ";\n")); err != nil {
				return fmt.Errorf("create tables: %w", err)
			}
		}
		for _, t := range c.Tables() {
			if err := rewriteTable(ctx, tx, t, m.Layout, cols[t.Name()]); err != nil {
				return fmt.Errorf("rewrite table %q: %w", t.Name(), err)
			}
		}
		if _, err := tx.Exec(ctx, sqlPutMarker, int64(c.Version()), string(layout)); err != nil {
			return fmt.Errorf("write marker: %w", err)
		}
		s.log.InfoContext(ctx, "pgstore: schema migrated", "from", m.SchemaVersion, "to", c.Version())
		return nil
	})
}

// schemaDDL returns the statements that bring the app tables of c to
// their declared shape: CREATE TABLE, ADD COLUMN for missing columns, and
// the declared indexes (an owned sync_ix_ index that differs from its
// declaration, or is no longer declared, is dropped and re-created).
func schemaDDL(ctx context.Context, tx pgx.Tx, c *schema.Compiled, cols map[string]map[string]physicalColumn) ([]string, error) {
	owned, err := ownedIndexes(ctx, tx, c)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range c.Tables() {
		q := quoteIdent(t.Name())
		have, exists := cols[t.Name()]
		if !exists {
			defs := []string{quoteIdent(colPartition) + " TEXT NOT NULL", quoteIdent(colRowID) + " TEXT NOT NULL"}
			if t.Materialize() {
				for _, col := range t.Columns() {
					defs = append(defs, quoteIdent(col.Name)+" "+sqlType(col.Type))
				}
			}
			defs = append(defs, quoteIdent(colServerVersion)+" BIGINT NOT NULL", quoteIdent(colScopes)+" JSONB NOT NULL",
				quoteIdent(colPayload)+" BYTEA NOT NULL", quoteIdent(colColumnVersions)+" BYTEA",
				"PRIMARY KEY ("+quoteIdent(colPartition)+", "+quoteIdent(colRowID)+")")
			out = append(out, "CREATE TABLE IF NOT EXISTS "+q+" ("+strings.Join(defs, ", ")+")")
		} else {
			if _, ok := have[colColumnVersions]; !ok {
				out = append(out, "ALTER TABLE "+q+" ADD COLUMN IF NOT EXISTS "+quoteIdent(colColumnVersions)+" BYTEA")
			}
			for _, col := range t.Columns() {
				if _, ok := have[col.Name]; !ok && t.Materialize() {
					out = append(out, "ALTER TABLE "+q+" ADD COLUMN IF NOT EXISTS "+quoteIdent(col.Name)+" "+sqlType(col.Type))
				}
			}
		}
		var declared []ownedIndex
		if t.Materialize() {
			for _, ix := range t.Indexes() {
				declared = append(declared, ownedIndex{name: ix.PhysicalName, unique: ix.Unique,
					columns: append([]string{colPartition}, ix.Columns...)})
			}
		}
		for _, o := range owned[t.Name()] {
			if !slices.ContainsFunc(declared, o.equal) {
				out = append(out, "DROP INDEX IF EXISTS "+quoteIdent(o.name))
			}
		}
		for _, d := range declared {
			if slices.ContainsFunc(owned[t.Name()], d.equal) {
				continue
			}
			quoted := make([]string, len(d.columns))
			for i, col := range d.columns {
				quoted[i] = quoteIdent(col)
			}
			unique := ""
			if d.unique {
				unique = "UNIQUE "
			}
			out = append(out, "CREATE "+unique+"INDEX IF NOT EXISTS "+quoteIdent(d.name)+" ON "+q+" ("+strings.Join(quoted, ", ")+")")
		}
	}
	return out, nil
}

// ownedIndex is an index named with schema.IndexPrefix.
type ownedIndex struct {
	name    string
	unique  bool
	columns []string
}

func (o ownedIndex) equal(p ownedIndex) bool {
	return o.name == p.name && o.unique == p.unique && slices.Equal(o.columns, p.columns)
}

const sqlOwnedIndexes = `SELECT n.name, c.relname, i.indisunique,
       array(SELECT a.attname::text
               FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.ord)
  FROM unnest($1::text[]) AS n(name)
  JOIN pg_index i ON i.indrelid = to_regclass(quote_ident(n.name))
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE starts_with(c.relname, $2)`

// ownedIndexes reads the owned indexes of c's tables, by table.
func ownedIndexes(ctx context.Context, tx pgx.Tx, c *schema.Compiled) (map[string][]ownedIndex, error) {
	names := make([]string, len(c.Tables()))
	for i, t := range c.Tables() {
		names[i] = t.Name()
	}
	rows, err := tx.Query(ctx, sqlOwnedIndexes, names, schema.IndexPrefix)
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	out := map[string][]ownedIndex{}
	var table string
	var o ownedIndex
	_, err = pgx.ForEachRow(rows, []any{&table, &o.name, &o.unique, &o.columns}, func() error {
		out[table] = append(out[table], o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	return out, nil
}

// rewriteBatch is the number of rows a migration rewrites per round trip.
const rewriteBatch = 500

// rewriteTable re-encodes the stored payloads of a table whose layout grew
// (appending NULLs for the new columns) and fills its typed columns from
// the payloads when they were missing physically; a table needing neither
// is left alone.
func rewriteTable(ctx context.Context, tx pgx.Tx, t *schema.CompiledTable, old schema.Layout, have map[string]physicalColumn) error {
	oldCols, inOld := old.Table(t.Name())
	if !inOld || have == nil {
		return nil // a new table: no rows to migrate
	}
	grew := len(oldCols) < len(t.Columns())
	backfill := false
	if t.Materialize() {
		for _, c := range oldCols {
			if _, ok := have[c.Name]; !ok {
				backfill = true
			}
		}
	}
	if !grew && !backfill {
		return nil
	}
	decode := t.RowCodec()
	if grew {
		wc := make([]wire.Column, len(oldCols))
		for i, c := range oldCols {
			wc[i] = wire.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
		}
		codec, err := wire.NewRowCodec(wc, t.Columns()[t.PrimaryKey()].Name)
		if err != nil {
			return fmt.Errorf("stored layout: %w", err)
		}
		decode = codec
	}
	ts := newTableSQL(t)
	update := rewriteSQL(ts)
	var afterPartition, afterRow *string
	for {
		page, err := readRewritePage(ctx, tx, ts, afterPartition, afterRow)
		if err != nil || len(page) == 0 {
			return err
		}
		b := &pgx.Batch{}
		for _, r := range page {
			vals, err := decode.DecodeRow(r.payload)
			if err != nil {
				return fmt.Errorf("decode stored row: %w", err)
			}
			for len(vals) < len(t.Columns()) {
				vals = append(vals, wire.Value{Null: true})
			}
			payload, err := t.RowCodec().AppendRow(nil, vals)
			if err != nil {
				return fmt.Errorf("encode row: %w", err)
			}
			args := []any{r.partition, r.rowID, payload}
			if len(ts.typed) > 0 {
				typed, err := ts.typedArgs(vals)
				if err != nil {
					return err
				}
				args = append(args, typed...)
			}
			b.Queue(update, args...)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("update rows: %w", err)
		}
		if len(page) < rewriteBatch {
			return nil
		}
		last := page[len(page)-1]
		afterPartition, afterRow = &last.partition, &last.rowID
	}
}

type rewriteRow struct {
	partition, rowID string
	payload          []byte
}

// readRewritePage reads the next page of a table in primary-key order.
func readRewritePage(ctx context.Context, tx pgx.Tx, ts *tableSQL, afterPartition, afterRow *string) ([]rewriteRow, error) {
	key := quoteIdent(colPartition) + ", " + quoteIdent(colRowID)
	sql := "SELECT " + key + ", " + quoteIdent(colPayload) + " FROM " + ts.quoted
	args := []any{}
	if afterPartition != nil {
		sql += " WHERE (" + key + ") > ($1, $2)"
		args = append(args, *afterPartition, *afterRow)
	}
	sql += fmt.Sprintf(" ORDER BY %s LIMIT %d", key, rewriteBatch)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var page []rewriteRow
	var r rewriteRow
	_, err = pgx.ForEachRow(rows, []any{&r.partition, &r.rowID, &r.payload}, func() error {
		page = append(page, rewriteRow{r.partition, r.rowID, r.payload})
		return nil
	})
	return page, err
}

// rewriteSQL updates a row's payload and typed columns by key.
func rewriteSQL(ts *tableSQL) string {
	sets := []string{quoteIdent(colPayload) + " = $3"}
	for i, c := range ts.typed {
		sets = append(sets, fmt.Sprintf("%s = $%d", quoteIdent(c.Name), i+4))
	}
	return "UPDATE " + ts.quoted + " SET " + strings.Join(sets, ", ") +
		" WHERE " + quoteIdent(colPartition) + " = $1 AND " + quoteIdent(colRowID) + " = $2"
}
