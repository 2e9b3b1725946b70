package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// Marker returns the database's schema marker.
func (s *Store) Marker(ctx context.Context) (store.Marker, error) {
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

// EnsureSchema brings the database to c, or checks it:
//
//   - a marker newer than c is store.ErrSchemaNewer;
//   - an equal marker must hold c's layout (else
//     sync.storage.stored_layout_mismatch) and the tables their columns
//     (else sync.storage.physical_layout_mismatch); nothing is written;
//   - an older or absent marker is migrated in one transaction whose first
//     statement locks sync_partitions in EXCLUSIVE mode, which waits for
//     the writers inside and holds new ones off; the marker is read again
//     under that lock (another server may have migrated meanwhile).
//
// On success c becomes the running schema of the store: its tables are
// the ones Write, Row and the scans accept, and its version stamps the
// appended commits.
func (s *Store) EnsureSchema(ctx context.Context, c *schema.Compiled) error {
	if err := s.check(); err != nil {
		return err
	}
	st := newSchemaState(c)
	m, err := readMarker(s.pool.QueryRow(ctx, sqlMarker))
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ensure schema: %w", err)
	}
	if !found || m.SchemaVersion < c.Version() {
		err = s.migrateSchema(ctx, c)
	} else {
		err = checkSchema(ctx, s.pool, c, m)
	}
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	s.schema.Store(st)
	return nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// checkSchema verifies a database whose marker is at c's version or newer.
func checkSchema(ctx context.Context, q querier, c *schema.Compiled, m store.Marker) error {
	if m.SchemaVersion > c.Version() {
		return fmt.Errorf("stored version %d, running version %d: %w", m.SchemaVersion, c.Version(), store.ErrSchemaNewer)
	}
	if mm, bad := schema.StoredLayoutMismatch(m.Layout, c.Layout()); bad {
		details := map[string]any{"table": mm.Table}
		if mm.Column != "" {
			details["column"] = mm.Column
		}
		return &store.Error{
			Code:    store.CodeStoredLayoutMismatch,
			Message: "the stored layout differs from the running schema at the same version",
			Details: details,
		}
	}
	cols, err := physicalColumns(ctx, q, c)
	if err != nil {
		return err
	}
	return checkPhysical(c, cols)
}

// physicalColumn is a column of an app table, from the catalog.
type physicalColumn struct {
	typ     string
	notNull bool
}

// physicalColumns reads the columns of c's tables, resolved through the
// search_path like the unqualified statements; a table that is missing has
// no entry.
func physicalColumns(ctx context.Context, q querier, c *schema.Compiled) (map[string]map[string]physicalColumn, error) {
	names := make([]string, len(c.Tables()))
	for i, t := range c.Tables() {
		names[i] = t.Name()
	}
	rows, err := q.Query(ctx, sqlPhysicalColumns, names)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	out := map[string]map[string]physicalColumn{}
	var table, column, typ string
	var notNull bool
	_, err = pgx.ForEachRow(rows, []any{&table, &column, &typ, &notNull}, func() error {
		if out[table] == nil {
			out[table] = map[string]physicalColumn{}
		}
		out[table][column] = physicalColumn{typ: typ, notNull: notNull}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	return out, nil
}

// sqlPhysicalColumns lists the columns of the named tables.
const sqlPhysicalColumns = `SELECT n.name, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
  FROM unnest($1::text[]) AS n(name)
  JOIN pg_attribute a ON a.attrelid = to_regclass(quote_ident(n.name))
 WHERE a.attnum > 0 AND NOT a.attisdropped`

// metaColumn is a meta column with its catalog type and nullability.
type metaColumn struct {
	name, typ string
	notNull   bool
}

// metaColumns are the meta columns of every app table.
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

// checkPhysical refuses tables that lack a configured column or whose
// meta columns have another type or nullability, like the reference
// server's same-version check (app-column types stay with the layout).
func checkPhysical(c *schema.Compiled, cols map[string]map[string]physicalColumn) error {
	refuse := func(details map[string]any) error {
		return &store.Error{
			Code:    store.CodePhysicalLayoutMismatch,
			Message: "an app table does not have the columns of the running schema",
			Details: details,
		}
	}
	for _, t := range c.Tables() {
		have, ok := cols[t.Name()]
		if !ok {
			return refuse(map[string]any{"table": t.Name(), "reason": "missing_table"})
		}
		for _, m := range metaColumns() {
			pc, ok := have[m.name]
			switch {
			case !ok:
				return refuse(map[string]any{"table": t.Name(), "column": m.name, "reason": "missing_column"})
			case pc.typ != m.typ:
				return refuse(map[string]any{"table": t.Name(), "column": m.name, "reason": "type", "expected": m.typ, "actual": pc.typ})
			case pc.notNull != m.notNull:
				return refuse(map[string]any{"table": t.Name(), "column": m.name, "reason": "nullability"})
			}
		}
		if !t.Materialize() {
			continue
		}
		for _, col := range t.Columns() {
			if _, ok := have[col.Name]; !ok {
				return refuse(map[string]any{"table": t.Name(), "column": col.Name, "reason": "missing_column"})
			}
		}
	}
	return nil
}
