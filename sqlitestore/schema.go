package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

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

// EnsureSchema creates the app tables of s and records the schema marker,
// or checks that the database already holds exactly this schema.
func (s *Store) EnsureSchema(ctx context.Context, sc *schema.Compiled) error {
	cs := &compiledSchema{schema: sc, tables: map[string]*tableSQL{}}
	for _, t := range sc.Tables() {
		cs.tables[t.Name()] = newTableSQL(t)
	}
	layout, err := sc.Layout().MarshalJSON()
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	err = s.w.do(ctx, func(ctx context.Context, c *wconn) error {
		bg := context.Background()
		var version int32
		var stored string
		err := c.queryRow(bg, "SELECT schema_version, layouts FROM sync_schema_meta WHERE id=1").Scan(&version, &stored)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil && strings.Contains(err.Error(), "no such table"):
			if err := c.exec(bg, `CREATE TABLE IF NOT EXISTS sync_schema_meta(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_version INTEGER NOT NULL,
  layouts TEXT NOT NULL DEFAULT '{}')`); err != nil {
				return err
			}
			c.forget()
		case err != nil:
			return err
		case version > sc.Version():
			return fmt.Errorf("%w: stored %d, running %d", store.ErrSchemaNewer, version, sc.Version())
		case version == sc.Version():
			return checkStoredLayout(stored, sc)
		default:
			return fmt.Errorf("ensure schema: migration from version %d to %d is not supported yet", version, sc.Version())
		}
		for _, t := range sc.Tables() {
			for _, stmt := range cs.tables[t.Name()].createDDL() {
				if err := c.exec(bg, stmt); err != nil {
					return fmt.Errorf("create table %s: %w", t.Name(), err)
				}
			}
		}
		c.forget()
		return c.exec(bg, `INSERT INTO sync_schema_meta(id, schema_version, layouts) VALUES (1, ?, ?)
ON CONFLICT(id) DO UPDATE SET schema_version=excluded.schema_version, layouts=excluded.layouts`,
			sc.Version(), string(layout))
	})
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	s.mu.Lock()
	s.schema = cs
	s.mu.Unlock()
	return nil
}

func checkStoredLayout(stored string, sc *schema.Compiled) error {
	got, err := schema.ParseLayout([]byte(stored))
	if err != nil {
		return &store.Error{Code: store.CodeStoredLayoutMismatch, Message: "stored layout unreadable", Err: err}
	}
	return store.CheckStoredLayout(got, sc.Layout())
}

// Marker returns the database's schema marker.
func (s *Store) Marker(ctx context.Context) (store.Marker, error) {
	if s.closed.Load() {
		return store.Marker{}, store.ErrClosed
	}
	var version int32
	var stored string
	err := s.rdb.QueryRowContext(ctx, "SELECT schema_version, layouts FROM sync_schema_meta WHERE id=1").Scan(&version, &stored)
	if errors.Is(err, sql.ErrNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")) {
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
