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
	// scanJoin reads a page of rows in the order of the row scope index
	// (ScanRows), and scanJoinLean the same without the scopes column.
	// Parameters: partition, table, key, value, after, limit.
	scanJoin, scanJoinLean string
	// scanRange reads the partition's rows after a row id in row-id order
	// along the primary key (scanDense), and scanRangeLean the same
	// without the scopes column. Parameters: partition, after.
	scanRange, scanRangeLean string
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
		selectBy:     "SELECT " + meta + " FROM " + q + " WHERE _sync_partition=? AND _sync_row_id=?",
		deleteBy:     "DELETE FROM " + q + " WHERE _sync_partition=? AND _sync_row_id=?",
		scanCols:     meta,
		scanJoin:     scanJoinSQL(q, "r._sync_row_id, r._sync_server_version, r._sync_scopes, r._sync_payload, r._sync_column_versions"),
		scanJoinLean: scanJoinSQL(q, "r._sync_row_id, r._sync_server_version, r._sync_payload, r._sync_column_versions"),
		scanRange: "SELECT " + meta + " FROM " + q +
			" WHERE _sync_partition=? AND _sync_row_id > ? ORDER BY _sync_row_id",
		scanRangeLean: "SELECT _sync_row_id, _sync_server_version, _sync_payload, _sync_column_versions FROM " + q +
			" WHERE _sync_partition=? AND _sync_row_id > ? ORDER BY _sync_row_id",
	}
}

// scanJoinSQL is the row scan of table (quoted) through the row scope
// index: the rows of one scope value after a row id, in row-id order.
func scanJoinSQL(table, cols string) string {
	return `SELECT ` + cols + ` FROM sync_row_scopes s
JOIN ` + table + ` r ON r._sync_partition = s.partition AND r._sync_row_id = s.row_id
WHERE s.partition=? AND s.tbl=? AND s.var=? AND s.value=? AND s.row_id > ?
ORDER BY s.row_id LIMIT ?`
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

func newCompiledSchema(sc *schema.Compiled) *compiledSchema {
	cs := &compiledSchema{schema: sc, tables: map[string]*tableSQL{}}
	for _, t := range sc.Tables() {
		cs.tables[t.Name()] = newTableSQL(t)
	}
	return cs
}

// EnsureSchemaWith brings the database to sc, or checks it:
//
//   - first the migration barrier: a checkpoint at sc's version that is not
//     activated and not among decls refuses with
//     sync.storage.checkpoint_incomplete;
//   - a newer marker is store.ErrSchemaNewer;
//   - an equal marker must hold sc's layout
//     (sync.storage.stored_layout_mismatch) and the tables the storage
//     layout (sync.storage.physical_layout_mismatch); a database that
//     lacks only what Upgrade adds (written by an older server line) is
//     refused with sync.storage.physical_layout_mismatch (reason
//     upgrade_required), telling the operator to run `syncgo migrate`;
//     nothing is written;
//   - an older or absent marker is migrated (see migrate), which installs
//     decls and raises every partition's writer fence to sc's version.
//
// The decision is read first on a read connection, so a database that
// needs nothing (the usual restart) or is refused never takes the write
// lock; a migration runs as one writer function (one transaction that no
// write interleaves with), which decides again on what it sees.
//
// On success sc becomes the running schema of the store: its tables are
// the ones Write and the reads accept, and its version stamps appended
// commits.
func (s *Store) EnsureSchemaWith(ctx context.Context, sc *schema.Compiled, decls []store.CheckpointDeclaration) error {
	cs := newCompiledSchema(sc)
	var plan schemaPlan
	err := s.readTx(ctx, func(c *conn) error {
		var err error
		plan, err = planSchemaOn(c, cs, decls, true)
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure schema: %w", err)
	}
	switch plan.action {
	case store.SchemaRefuse, store.SchemaUpgradeNeeded:
		return fmt.Errorf("ensure schema: %w", plan.refusal)
	case store.SchemaCreate, store.SchemaMigrate:
		nowMs := time.Now().UnixMilli()
		err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
			s.w.dropRecent = true // the log changes under the recent commits (recent.go)
			plan, err := planSchemaOn(c, cs, decls, true)
			if err != nil {
				return err
			}
			switch plan.action {
			case store.SchemaRefuse, store.SchemaUpgradeNeeded:
				return plan.refusal
			case store.SchemaCreate, store.SchemaMigrate:
				return migrate(c, cs, plan.old, decls, nowMs)
			}
			return nil // migrated by another process meanwhile
		})
		if err != nil {
			return fmt.Errorf("ensure schema: %w", err)
		}
	}
	s.mu.Lock()
	s.schema = cs
	s.mu.Unlock()
	return nil
}

// schemaPlan is what EnsureSchemaWith would do.
type schemaPlan struct {
	action store.SchemaAction
	// refusal is the error of SchemaRefuse and SchemaUpgradeNeeded.
	refusal error
	// upgrade is what Upgrade would do (SchemaUpgradeNeeded).
	upgrade []ddlStep
	// old is the stored layout a migration starts from (nil without a
	// marker).
	old schema.Layout
}

func refuse(err error) schemaPlan { return schemaPlan{action: store.SchemaRefuse, refusal: err} }

// planSchemaOn decides what EnsureSchemaWith does; it only reads. Errors
// are the database's; refusals are in the plan. Without barrier, the
// checkpoints are not consulted (Upgrade, which does not serve).
func planSchemaOn(c *conn, cs *compiledSchema, decls []store.CheckpointDeclaration, barrier bool) (schemaPlan, error) {
	sc := cs.schema
	if barrier {
		if err := checkBarrier(c, sc.Version(), decls); err != nil {
			if store.ErrorCode(err) != "" {
				return refuse(err), nil
			}
			return schemaPlan{}, err
		}
	}
	m, found, err := readMarkerOn(c)
	if err != nil {
		if store.ErrorCode(err) != "" {
			return refuse(err), nil
		}
		return schemaPlan{}, err
	}
	switch {
	case found && m.SchemaVersion > sc.Version():
		return refuse(fmt.Errorf("%w: stored %d, running %d", store.ErrSchemaNewer, m.SchemaVersion, sc.Version())), nil
	case found && m.SchemaVersion == sc.Version():
		if err := store.CheckStoredLayout(m.Layout, sc.Layout()); err != nil {
			return refuse(err), nil
		}
		if err := checkPhysicalLayout(c, cs, true); err != nil {
			if store.ErrorCode(err) != "" {
				return refuse(err), nil
			}
			return schemaPlan{}, err
		}
		steps, err := planUpgrade(c, cs)
		if err != nil {
			return schemaPlan{}, err
		}
		if len(steps) > 0 {
			return schemaPlan{action: store.SchemaUpgradeNeeded, refusal: store.UpgradeRequired(stepLines(steps), sc.Version()), upgrade: steps}, nil
		}
		return schemaPlan{action: store.SchemaNone}, nil
	case found:
		if err := checkAppendOnly(m.Layout, sc); err != nil {
			return refuse(err), nil
		}
		return schemaPlan{action: store.SchemaMigrate, old: m.Layout}, nil
	}
	return schemaPlan{action: store.SchemaCreate}, nil
}

// checkAppendOnly is the layout rule of a migration.
func checkAppendOnly(old schema.Layout, sc *schema.Compiled) error {
	if err := schema.CheckAppendOnly(old, sc.Layout()); err != nil {
		return &store.Error{Code: store.CodeSchemaMigrationPending, Message: "the stored layout cannot be migrated by appending nullable columns",
			Details: map[string]any{"runningSchemaVersion": sc.Version()}, Err: err}
	}
	return nil
}

// isNoSuchTable reports a query on a table the database does not have
// (a read-only store on a database no read-write open has migrated).
func isNoSuchTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table")
}

// checkBarrier refuses when a checkpoint at version is incomplete and not
// declared by the caller; an empty declaration set declares nothing.
func checkBarrier(c *conn, version int32, decls []store.CheckpointDeclaration) error {
	rows, err := c.query(`SELECT partition, name FROM sync_backfill_checkpoints
WHERE schema_version=? AND state <> 'activated' ORDER BY partition, name`, version)
	if isNoSuchTable(err) {
		return nil
	}
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

// readMarkerOn reads the marker; a database without the marker table has
// none.
func readMarkerOn(c *conn) (store.Marker, bool, error) {
	var version int32
	var stored string
	err := c.queryRow("SELECT schema_version, layouts FROM sync_schema_meta WHERE id=1").Scan(&version, &stored)
	switch {
	case errors.Is(err, errNoRows) || isNoSuchTable(err):
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
	if errors.Is(err, errNoRows) || isNoSuchTable(err) {
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
