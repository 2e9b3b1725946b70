package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// Marker returns the database's schema marker.
func (s *Store) Marker(ctx context.Context) (store.Marker, error) {
	return retry(s, ctx, "Marker", func() (store.Marker, error) { return s.markerOnce(ctx) })
}

// markerOnce is Marker, once (see "Lost connections", retry.go).
func (s *Store) markerOnce(ctx context.Context) (store.Marker, error) {
	if err := s.check(); err != nil {
		return store.Marker{}, err
	}
	m, err := readMarker(s.pool.QueryRow(ctx, sqlMarker))
	if err != nil {
		return store.Marker{}, fmt.Errorf("marker: %w", err)
	}
	return m, nil
}

// readMarker scans sqlMarker; no row is store.ErrNotFound.
func readMarker(r pgx.Row) (store.Marker, error) {
	var (
		version int64
		layouts string
	)
	if err := r.Scan(&version, &layouts); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Marker{}, store.ErrNotFound
		}
		return store.Marker{}, err
	}
	l, err := schema.ParseLayout([]byte(layouts))
	if err != nil {
		return store.Marker{}, fmt.Errorf("%w: %v", store.ErrUnreadable, err)
	}
	return store.Marker{SchemaVersion: int32(version), Layout: l}, nil
}

// EnsureSchema is EnsureSchemaWith with no checkpoint declarations.
func (s *Store) EnsureSchema(ctx context.Context, c *schema.Compiled) error {
	return s.EnsureSchemaWith(ctx, c, nil)
}

// EnsureSchemaWith brings the database to c, or checks it, as
// planSchema (inspect.go) decides from one REPEATABLE READ READ ONLY
// snapshot:
//
//   - first the migration barrier: a checkpoint at c's version that is not
//     activated and not among decls refuses with
//     sync.storage.checkpoint_incomplete;
//   - a marker newer than c is store.ErrSchemaNewer;
//   - an equal marker must hold c's layout (else
//     sync.storage.stored_layout_mismatch) and the tables the storage
//     layout (else sync.storage.physical_layout_mismatch); a database that
//     only lacks what Upgrade adds (the reference 0.15 to 0.20 line) is
//     refused with reason upgrade_required; nothing is written, except
//     core objects gone missing since Open, which are applied as Open
//     does;
//   - an older or absent marker is migrated (see migrateSchema) in one
//     transaction under the migration locks (lock.go); the plan is made
//     again under them (another server may have migrated meanwhile), and
//     the bump installs decls and raises every partition's writer fence to
//     c's version.
//
// On success c becomes the running schema of the store: its tables are
// the ones Write, Row and the scans accept, and its version stamps the
// appended commits. A read-only store only checks: what would write fails
// with ErrReadOnly.
func (s *Store) EnsureSchemaWith(ctx context.Context, c *schema.Compiled, decls []store.CheckpointDeclaration) error {
	if err := s.check(); err != nil {
		return err
	}
	st := newSchemaState(c)
	p, err := s.readOnlyPlan(ctx, c, decls)
	if err == nil {
		err = s.actOn(ctx, p, c, decls)
	}
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	ordered, err := orderIndexes(ctx, s.pool, c)
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	for name, ts := range st.tables {
		if kind := ordered[name]; kind != unordered {
			ts.useOrder(kind)
		}
	}
	if err := st.markRowsBatch(ctx, s.pool, c); err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	s.schema.Store(st)
	return nil
}

// markRowsBatch sets rowsBatch on the tables whose stored typed columns
// have the types that writeRows binds: a table another server created
// (the reference) or an operator altered may differ, and its upserts then
// keep their one statement each (a bound array of another type would fail
// the coalesced tail every time, each failure costing the batch a resend).
func (st *schemaState) markRowsBatch(ctx context.Context, q querier, c *schema.Compiled) error {
	cols, err := physicalColumns(ctx, q, c)
	if err != nil {
		return err
	}
	for name, ts := range st.tables {
		have := cols[name]
		ok := have != nil
		for _, col := range ts.typed {
			if pc, found := have[col.Name]; !found || !strings.EqualFold(pc.typ, sqlType(col.Type)) {
				ok = false
			}
		}
		ts.rowsBatch = ok
	}
	return nil
}

// actOn carries out the plan of EnsureSchemaWith.
func (s *Store) actOn(ctx context.Context, p schemaPlan, c *schema.Compiled, decls []store.CheckpointDeclaration) error {
	switch p.action {
	case store.SchemaRefuse, store.SchemaUpgradeNeeded:
		return p.refusal
	case store.SchemaNone:
		if len(p.core) == 0 {
			return nil
		}
		if s.cfg.ReadOnly {
			// A missing index (sync_row_scopes_by_row, which the
			// reference does not create) slows writes, not reads; the
			// segment store reads without sync_segment_bodies (a
			// database of a release before it holds no bodies).
			var need []string
			for _, line := range stepLines(p.core) {
				if !strings.HasPrefix(line, "create index ") && line != "create table sync_segment_bodies" {
					need = append(need, line)
				}
			}
			if len(need) == 0 {
				return nil
			}
			return fmt.Errorf("the core tables need %s: %w", strings.Join(need, ", "), ErrReadOnly)
		}
		_, err := s.migrateCore(ctx)
		return err
	}
	if s.cfg.ReadOnly {
		return fmt.Errorf("the schema would be %sd (version %d): %w", p.action, c.Version(), ErrReadOnly)
	}
	if err := s.prebuildIndexes(ctx, c); err != nil {
		return err
	}
	return s.migrateSchema(ctx, c, decls)
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// physicalColumn is a column of an app table, from the catalog.
type physicalColumn struct {
	typ     string
	notNull bool
	// pk is the 1-based position of the column in the primary key, 0
	// outside it.
	pk int
}

// physicalColumns reads the columns of c's tables, resolved through the
// session's search_path like the unqualified statements; a table that is
// missing has no entry.
func physicalColumns(ctx context.Context, q querier, c *schema.Compiled) (map[string]map[string]physicalColumn, error) {
	rows, err := q.Query(ctx, sqlPhysicalColumns, tableNames(c))
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	out := map[string]map[string]physicalColumn{}
	var table, column, typ string
	var notNull bool
	var pk int32
	_, err = pgx.ForEachRow(rows, []any{&table, &column, &typ, &notNull, &pk}, func() error {
		if out[table] == nil {
			out[table] = map[string]physicalColumn{}
		}
		out[table][column] = physicalColumn{typ: typ, notNull: notNull, pk: int(pk)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	return out, nil
}

// sqlPhysicalColumns lists the columns of the named tables, with their
// catalog type, nullability and position in the primary key (0 outside
// it). to_regclass resolves a name through the search_path, as the
// unqualified statements of the driver do.
const sqlPhysicalColumns = `SELECT n.name, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce((SELECT k.ord::int4 FROM pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                  WHERE i.indrelid = a.attrelid AND i.indisprimary AND k.attnum = a.attnum), 0)
  FROM unnest($1::text[]) AS n(name)
  JOIN pg_attribute a ON a.attrelid = to_regclass(quote_ident(n.name))
 WHERE a.attnum > 0 AND NOT a.attisdropped`

// metaColumn is a meta column with its catalog type and nullability.
type metaColumn struct {
	name, typ string
	notNull   bool
}

// metaColumns are the meta columns of every app table in table order: the
// first two lead the table and are its primary key, the others follow the
// app columns.
func metaColumns() []metaColumn {
	return []metaColumn{
		{colPartition, "text", true},
		{colRowID, "text", true},
		{colServerVersion, "bigint", true},
		{colScopes, "jsonb", true},
		{colPayload, "bytea", true},
		{colColumnVersions, "bytea", false},
	}
}

// expectedColumns are the columns the row store reads and writes, in
// table order.
func expectedColumns(t *schema.CompiledTable) []string {
	meta := metaColumns()
	out := []string{meta[0].name, meta[1].name}
	if t.Materialize() {
		for _, c := range t.Columns() {
			out = append(out, c.Name)
		}
	}
	for _, m := range meta[2:] {
		out = append(out, m.name)
	}
	return out
}

func nullability(notNull bool) string {
	if notNull {
		return "not_null"
	}
	return "nullable"
}

// checkPhysical compares the tables with the storage layout (the
// reference server's same-version check, 0.24), refusing in this order: a
// missing table, a missing configured column, a meta column's type
// (format_type, compared case-insensitively) then nullability, in table
// order, and a primary key other than (_sync_partition, _sync_row_id).
// App-column types and nullability stay with the stored layout: the
// columns a migration adds are nullable whatever the schema says.
func checkPhysical(c *schema.Compiled, cols map[string]map[string]physicalColumn) error {
	refuse := func(details map[string]any) error {
		return &store.Error{
			Code:    store.CodePhysicalLayoutMismatch,
			Message: "a database table differs from the storage layout",
			Details: details,
		}
	}
	for _, t := range c.Tables() {
		have, ok := cols[t.Name()]
		if !ok {
			return refuse(map[string]any{"table": t.Name(), "reason": "missing_table"})
		}
		for _, name := range expectedColumns(t) {
			if _, ok := have[name]; !ok {
				return refuse(map[string]any{"table": t.Name(), "column": name, "reason": "missing_column"})
			}
		}
		for _, m := range metaColumns() {
			pc := have[m.name]
			if !strings.EqualFold(pc.typ, m.typ) {
				return refuse(map[string]any{"table": t.Name(), "column": m.name, "reason": "type", "expected": m.typ, "actual": pc.typ})
			}
			if pc.notNull != m.notNull {
				return refuse(map[string]any{"table": t.Name(), "column": m.name, "reason": "nullability",
					"expected": nullability(m.notNull), "actual": nullability(pc.notNull)})
			}
		}
		names := slices.Sorted(maps.Keys(have))
		for _, name := range names {
			want := 0
			switch name {
			case colPartition:
				want = 1
			case colRowID:
				want = 2
			}
			if have[name].pk != want {
				return refuse(map[string]any{"table": t.Name(), "column": name, "reason": "primary_key"})
			}
		}
	}
	return nil
}
