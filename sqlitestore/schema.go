package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// tableSQL is the SQL of one app table.
type tableSQL struct {
	t        *schema.CompiledTable
	name     string // quoted
	upsert   string
	selectBy string
	deleteBy string
	scanCols string
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func sqliteType(t wire.ColumnType) string {
	switch t {
	case wire.TypeInteger, wire.TypeBoolean:
		return "INTEGER"
	case wire.TypeFloat:
		return "REAL"
	case wire.TypeBytes, wire.TypeCRDT:
		return "BLOB"
	}
	return "TEXT"
}

func newTableSQL(t *schema.CompiledTable) *tableSQL {
	q := quoteIdent(t.Name())
	cols := []string{"_sync_partition", "_sync_row_id"}
	var sets []string
	if t.Materialize() {
		for _, c := range t.Columns() {
			cols = append(cols, quoteIdent(c.Name))
			sets = append(sets, quoteIdent(c.Name)+"=excluded."+quoteIdent(c.Name))
		}
	}
	cols = append(cols, "_sync_server_version", "_sync_scopes", "_sync_payload", "_sync_column_versions")
	sets = append(sets,
		"_sync_server_version=excluded._sync_server_version",
		"_sync_scopes=excluded._sync_scopes",
		"_sync_payload=excluded._sync_payload",
		"_sync_column_versions=excluded._sync_column_versions")
	marks := strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",")
	const meta = "_sync_row_id, _sync_server_version, _sync_scopes, _sync_payload, _sync_column_versions"
	return &tableSQL{
		t:    t,
		name: q,
		upsert: "INSERT INTO " + q + " (" + strings.Join(cols, ", ") + ") VALUES (" + marks +
			") ON CONFLICT(_sync_partition, _sync_row_id) DO UPDATE SET " + strings.Join(sets, ", "),
		selectBy: "SELECT " + meta + " FROM " + q + " WHERE _sync_partition=? AND _sync_row_id=?",
		deleteBy: "DELETE FROM " + q + " WHERE _sync_partition=? AND _sync_row_id=?",
		scanCols: meta,
	}
}

// createDDL returns the statements that create the table and its indexes.
func (ts *tableSQL) createDDL() []string {
	t := ts.t
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + ts.name + " (\n")
	b.WriteString("  _sync_partition TEXT NOT NULL,\n  _sync_row_id TEXT NOT NULL,\n")
	if t.Materialize() {
		for _, c := range t.Columns() {
			b.WriteString("  " + quoteIdent(c.Name) + " " + sqliteType(c.Type) + ",\n")
		}
	}
	b.WriteString("  _sync_server_version INTEGER NOT NULL,\n  _sync_scopes TEXT NOT NULL,\n")
	b.WriteString("  _sync_payload BLOB NOT NULL,\n  _sync_column_versions BLOB,\n")
	b.WriteString("  PRIMARY KEY (_sync_partition, _sync_row_id)\n)")
	out := []string{b.String()}
	if t.Materialize() {
		for _, ix := range t.Indexes() {
			cols := []string{"_sync_partition"}
			for _, c := range ix.Columns {
				cols = append(cols, quoteIdent(c))
			}
			unique := ""
			if ix.Unique {
				unique = "UNIQUE "
			}
			out = append(out, "CREATE "+unique+"INDEX IF NOT EXISTS "+quoteIdent(ix.PhysicalName)+
				" ON "+ts.name+" ("+strings.Join(cols, ", ")+")")
		}
	}
	return out
}

// EnsureSchema is EnsureSchemaWith with no checkpoint declarations.
func (s *Store) EnsureSchema(ctx context.Context, sc *schema.Compiled) error {
	return s.EnsureSchemaWith(ctx, sc, nil)
}

// EnsureSchemaWith brings the database to sc, or checks it, in one writer
// function (one transaction that no write interleaves with):
//
//   - first the migration barrier: a checkpoint at sc's version that is not
//     activated and not among decls refuses with
//     sync.storage.checkpoint_incomplete;
//   - a newer marker is store.ErrSchemaNewer;
//   - an equal marker must hold sc's layout
//     (sync.storage.stored_layout_mismatch) and the tables the storage
//     layout (sync.storage.physical_layout_mismatch); nothing is written;
//   - an older or absent marker is migrated (see migrate), which installs
//     decls and raises every partition's writer fence to sc's version.
//
// On success sc becomes the running schema of the store: its tables are
// the ones Write and the reads accept, and its version stamps appended
// commits.
func (s *Store) EnsureSchemaWith(ctx context.Context, sc *schema.Compiled, decls []store.CheckpointDeclaration) error {
	cs := &compiledSchema{schema: sc, tables: map[string]*tableSQL{}}
	for _, t := range sc.Tables() {
		cs.tables[t.Name()] = newTableSQL(t)
	}
	nowMs := time.Now().UnixMilli()
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		if err := checkBarrier(c, sc.Version(), decls); err != nil {
			return err
		}
		m, found, err := readMarkerOn(c)
		if err != nil {
			return err
		}
		switch {
		case found && m.SchemaVersion > sc.Version():
			return fmt.Errorf("%w: stored %d, running %d", store.ErrSchemaNewer, m.SchemaVersion, sc.Version())
		case found && m.SchemaVersion == sc.Version():
			if err := store.CheckStoredLayout(m.Layout, sc.Layout()); err != nil {
				return err
			}
			return checkPhysicalLayout(c, cs)
		}
		var old schema.Layout
		if found {
			old = m.Layout
		}
		return migrate(c, cs, old, decls, nowMs)
	})
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	s.mu.Lock()
	s.schema = cs
	s.mu.Unlock()
	return nil
}

// checkBarrier refuses when a checkpoint at version is incomplete and not
// declared by the caller; an empty declaration set declares nothing.
func checkBarrier(c *conn, version int32, decls []store.CheckpointDeclaration) error {
	rows, err := c.query(`SELECT partition, name FROM sync_backfill_checkpoints
WHERE schema_version=? AND state <> 'activated' ORDER BY partition, name`, version)
	if err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var partition, name string
		if err := rows.Scan(&partition, &name); err != nil {
			return fmt.Errorf("read checkpoints: %w", err)
		}
		declared := slices.ContainsFunc(decls, func(d store.CheckpointDeclaration) bool {
			return d.Partition == partition && d.Name == name
		})
		if !declared {
			return &store.Error{Code: store.CodeCheckpointIncomplete, Message: "a backfill checkpoint at the running schema version is incomplete",
				Details: map[string]any{"partition": partition, "name": name}}
		}
	}
	return rows.Err()
}

// readMarkerOn reads the marker on the writer's connection, creating the
// marker table of a new database (the caller's transaction undoes it on
// failure).
func readMarkerOn(c *conn) (store.Marker, bool, error) {
	var version int32
	var stored string
	err := c.queryRow("SELECT schema_version, layouts FROM sync_schema_meta WHERE id=1").Scan(&version, &stored)
	switch {
	case errors.Is(err, errNoRows):
		return store.Marker{}, false, nil
	case err != nil && strings.Contains(err.Error(), "no such table"):
		if err := c.exec(`CREATE TABLE IF NOT EXISTS sync_schema_meta(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_version INTEGER NOT NULL,
  layouts TEXT NOT NULL DEFAULT '{}')`); err != nil {
			return store.Marker{}, false, err
		}
		c.forget()
		return store.Marker{}, false, nil
	case err != nil:
		return store.Marker{}, false, err
	}
	layout, err := schema.ParseLayout([]byte(stored))
	if err != nil {
		return store.Marker{}, false, &store.Error{Code: store.CodeStoredLayoutMismatch, Message: "stored layout unreadable", Err: err}
	}
	return store.Marker{SchemaVersion: version, Layout: layout}, true, nil
}

// Marker returns the database's schema marker.
func (s *Store) Marker(ctx context.Context) (store.Marker, error) {
	if s.closed.Load() {
		return store.Marker{}, store.ErrClosed
	}
	var version int32
	var stored string
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow("SELECT schema_version, layouts FROM sync_schema_meta WHERE id=1").Scan(&version, &stored)
	})
	if errors.Is(err, errNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")) {
		return store.Marker{}, store.ErrNotFound
	}
	if err != nil {
		return store.Marker{}, fmt.Errorf("read schema marker: %w", err)
	}
	layout, err := schema.ParseLayout([]byte(stored))
	if err != nil {
		return store.Marker{}, fmt.Errorf("%w: layouts: %v", store.ErrUnreadable, err)
	}
	return store.Marker{SchemaVersion: version, Layout: layout}, nil
}
