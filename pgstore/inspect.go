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
)

var (
	_ store.Inspector = (*Store)(nil)
	_ store.Upgrader  = (*Store)(nil)
)

// What opening with a schema would do is decided in one place, planSchema,
// from the catalog and the stored state, reading only. EnsureSchemaWith
// runs it in a REPEATABLE READ READ ONLY transaction and acts on it;
// PlanSchema returns it; Upgrade and the schema bump run it again under the
// migration lock.
//
// Two kinds of addition are told apart. The core steps (core.go) are
// applied by every store that may write, at Open and again before a bump,
// so they do not decide the action. The upgrade steps of a same-version
// database (planAppUpgrade: the _sync_column_versions column that wire
// version 3 needs, absent from tables of the reference 0.15 to 0.20 line,
// declared indexes in the storage's shape, and the layouts of a marker
// that has none) are applied only by Upgrade: a database that lacks them
// is refused with an error that says to run `syncgo migrate`, and nothing
// is written. A bump does all of it itself, like any other migration.

// schemaPlan is what EnsureSchemaWith would do.
type schemaPlan struct {
	action  store.SchemaAction
	refusal error
	// core are the steps of the core tables; app the upgrade steps of the
	// app tables and the marker.
	core, app []coreStep
	// marker is the stored marker when found.
	marker store.Marker
	found  bool
}

// upgradeLines are the lines of what Upgrade would do.
func (p schemaPlan) upgradeLines() []string {
	return append(stepLines(p.core), stepLines(p.app)...)
}

// planOptions select how planSchema reads.
type planOptions struct {
	// locked: under the migration lock, in a transaction that may write;
	// the marker row is read FOR UPDATE.
	locked bool
	// noBarrier skips the checkpoint barrier (Upgrade does not serve).
	noBarrier bool
}

// planSchema decides what EnsureSchemaWith(c, decls) would do. It only
// reads. A refusal is in the plan, not the error, which is for failures to
// read.
func planSchema(ctx context.Context, tx pgx.Tx, c *schema.Compiled, decls []store.CheckpointDeclaration, opts planOptions) (schemaPlan, error) {
	core, err := planCore(ctx, tx)
	var se *store.Error
	if errors.As(err, &se) {
		return schemaPlan{action: store.SchemaRefuse, refusal: err}, nil
	}
	if err != nil {
		return schemaPlan{}, err
	}
	p := schemaPlan{core: core}
	refuse := func(err error) (schemaPlan, error) {
		p.action, p.refusal = store.SchemaRefuse, err
		return p, nil
	}
	if !opts.noBarrier && !createsTable(core, "sync_backfill_checkpoints") {
		if err := checkBarrier(ctx, tx, c.Version(), decls); err != nil {
			if store.ErrorCode(err) != "" {
				return refuse(err)
			}
			return schemaPlan{}, err
		}
	}
	switch {
	case createsTable(core, "sync_schema_meta"):
		err = store.ErrNotFound
	case addsColumn(core, "sync_schema_meta", "layouts"):
		p.marker, err = readMarker(tx.QueryRow(ctx, sqlMarkerWithoutLayouts))
	case opts.locked:
		p.marker, err = readMarker(tx.QueryRow(ctx, sqlMarkerLocked))
	default:
		p.marker, err = readMarker(tx.QueryRow(ctx, sqlMarker))
	}
	p.found = err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return schemaPlan{}, err
	}
	switch {
	case !p.found:
		p.action = store.SchemaCreate
		return p, nil
	case p.marker.SchemaVersion > c.Version():
		return refuse(fmt.Errorf("stored version %d, running version %d: %w", p.marker.SchemaVersion, c.Version(), store.ErrSchemaNewer))
	case p.marker.SchemaVersion < c.Version():
		if err := schema.CheckAppendOnly(p.marker.Layout, c.Layout()); err != nil {
			return refuse(appendOnlyRefusal(p.marker, c, err))
		}
		p.action = store.SchemaMigrate
		return p, nil
	}
	cols, err := physicalColumns(ctx, tx, c)
	if err != nil {
		return schemaPlan{}, err
	}
	if p.app, err = planAppUpgrade(ctx, tx, c, cols); err != nil {
		return schemaPlan{}, err
	}
	stored := p.marker.Layout
	if len(stored) == 0 && len(c.Tables()) > 0 {
		// A marker without layouts (an older reference server): the
		// tables are checked against c's layout below, which Upgrade then
		// records.
		layout, err := c.Layout().MarshalJSON()
		if err != nil {
			return schemaPlan{}, err
		}
		p.app = append(p.app, coreStep{
			line: fmt.Sprintf("record the layouts of schema version %d in sync_schema_meta", c.Version()),
			sql:  `UPDATE sync_schema_meta SET layouts = $1 WHERE id = 1`,
			args: []any{string(layout)},
		})
		stored = c.Layout()
	}
	if mm, bad := schema.StoredLayoutMismatch(stored, c.Layout()); bad {
		details := map[string]any{"table": mm.Table}
		if mm.Column != "" {
			details["column"] = mm.Column
		}
		return refuse(&store.Error{
			Code:    store.CodeStoredLayoutMismatch,
			Message: "the stored layout differs from the running schema at the same version",
			Details: details,
		})
	}
	if err := checkPhysical(c, cols); err != nil {
		return refuse(err)
	}
	if len(p.app) > 0 {
		p.action, p.refusal = store.SchemaUpgradeNeeded, store.UpgradeRequired(p.upgradeLines(), c.Version())
		return p, nil
	}
	p.action = store.SchemaNone
	return p, nil
}

// planAppUpgrade returns what Upgrade does to the existing app tables of a
// same-version database that the reference 0.15 to 0.20 line wrote: the
// missing _sync_column_versions column (NULL: every column at the row's
// version), and the declared indexes rebuilt in the storage's shape (led
// by _sync_partition, so unique per partition) or created. Rows, payloads,
// the log and the cursors stay as they are. cols gets the columns it adds,
// as they will be. It only reads.
func planAppUpgrade(ctx context.Context, tx pgx.Tx, c *schema.Compiled, cols map[string]map[string]physicalColumn) ([]coreStep, error) {
	owned, err := ownedIndexes(ctx, tx, c)
	if err != nil {
		return nil, err
	}
	var steps []coreStep
	for _, t := range c.Tables() {
		have, ok := cols[t.Name()]
		if !ok {
			continue // refused as missing_table
		}
		q := quoteIdent(t.Name())
		if _, ok := have[colColumnVersions]; !ok {
			steps = append(steps, coreStep{
				line: "add column " + t.Name() + "." + colColumnVersions,
				sql:  "ALTER TABLE " + q + " ADD COLUMN IF NOT EXISTS " + quoteIdent(colColumnVersions) + " BYTEA",
			})
			have[colColumnVersions] = physicalColumn{typ: "bytea"}
		}
		if !t.Materialize() {
			continue
		}
		for _, d := range declaredIndexes(t) {
			i := slices.IndexFunc(owned[t.Name()], func(o ownedIndex) bool { return o.name == d.name })
			switch {
			case i < 0:
				steps = append(steps, coreStep{line: "create index " + d.name + " on " + t.Name(), sql: d.buildSQL(q, false)})
			case !owned[t.Name()][i].equal(d):
				steps = append(steps, coreStep{line: "rebuild index " + d.name + " on " + t.Name(),
					sql: "DROP INDEX " + quoteIdent(d.name) + ";\n" + d.buildSQL(q, false)})
			}
		}
	}
	return steps, nil
}

// sqlMarkerWithoutLayouts reads a marker whose table has no layouts
// column yet: an empty layout.
const sqlMarkerWithoutLayouts = `SELECT schema_version, '{}' FROM sync_schema_meta WHERE id = 1`

// createsTable reports whether steps create the table.
func createsTable(steps []coreStep, table string) bool {
	for _, s := range steps {
		if s.line == "create table "+table {
			return true
		}
	}
	return false
}

// addsColumn reports whether steps add the column to the table.
func addsColumn(steps []coreStep, table, column string) bool {
	for _, s := range steps {
		if s.line == "add column "+table+"."+column {
			return true
		}
	}
	return false
}

// appendOnlyRefusal is the refusal of a bump that schema.CheckAppendOnly
// refuses.
func appendOnlyRefusal(m store.Marker, c *schema.Compiled, err error) error {
	return &store.Error{
		Code:    store.CodeSchemaMigrationPending,
		Message: "the stored layout cannot be migrated by appending nullable columns",
		Details: map[string]any{"storedSchemaVersion": m.SchemaVersion, "runningSchemaVersion": c.Version()},
		Err:     err,
	}
}

// readOnlyPlan runs planSchema in one REPEATABLE READ READ ONLY
// transaction: the catalog, the barrier and the marker from one snapshot.
func (s *Store) readOnlyPlan(ctx context.Context, c *schema.Compiled, decls []store.CheckpointDeclaration) (schemaPlan, error) {
	var p schemaPlan
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		p, err = planSchema(ctx, tx, c, decls, planOptions{})
		return err
	})
	return p, err
}

// PlanSchema reports what EnsureSchemaWith(ctx, c, decls) would do, from
// one read-only snapshot, writing nothing (a read-only store too). The
// action assumes that the core tables are brought to the layout, as every
// store that may write does at Open; their steps are among the Upgrade
// lines (Upgrade applies them too).
func (s *Store) PlanSchema(ctx context.Context, c *schema.Compiled, decls []store.CheckpointDeclaration) (store.SchemaPlan, error) {
	if err := s.check(); err != nil {
		return store.SchemaPlan{}, err
	}
	p, err := s.readOnlyPlan(ctx, c, decls)
	if err != nil {
		return store.SchemaPlan{}, fmt.Errorf("plan schema: %w", err)
	}
	return store.SchemaPlan{Action: p.action, Refusal: p.refusal, Upgrade: p.upgradeLines()}, nil
}

// Upgrade brings a database that an older server line wrote to what this
// build needs for c, without rewriting data, in one transaction under the
// migration lock (lock.go): the missing core tables, columns, function and
// trigger, the _sync_column_versions column of c's existing app tables
// (nullable: existing rows have none), and the layouts of a marker at c's
// version that has none. Nothing is dropped, no row and no logged change is
// rewritten, client cursors stay valid. It returns what it did, the lines
// PlanSchema lists; nothing when there is nothing to do. A database that
// EnsureSchemaWith would refuse for another reason (a newer marker, another
// layout, a missing app column) is refused the same way and left alone.
func (s *Store) Upgrade(ctx context.Context, c *schema.Compiled) ([]string, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	// First from a read-only snapshot: a database with nothing to add is
	// answered without the migration lock, which would hold every writer
	// of the processes serving it (and wait behind their transactions).
	var pending bool
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		p, err := planSchema(ctx, tx, c, nil, planOptions{noBarrier: true})
		if err != nil {
			return err
		}
		if p.action == store.SchemaRefuse {
			return p.refusal
		}
		pending = len(p.core)+len(p.app) > 0
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	if !pending {
		return nil, nil
	}
	var done []string
	err = s.withMigrationLock(ctx, "upgrade", func(ctx context.Context, tx pgx.Tx) error {
		p, err := planSchema(ctx, tx, c, nil, planOptions{locked: true, noBarrier: true})
		if err != nil {
			return err
		}
		if p.action == store.SchemaRefuse {
			return p.refusal
		}
		if err := applySteps(ctx, tx, p.core); err != nil {
			return err
		}
		if err := applySteps(ctx, tx, p.app); err != nil {
			return err
		}
		done = p.upgradeLines()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	if len(done) > 0 {
		s.log.InfoContext(ctx, "pgstore: database upgraded", "steps", strings.Join(done, "; "))
	}
	return done, nil
}

// HoldsCommitLog reports whether the schema the connections' search_path
// selects has a commit log (sync_commits), as every database syncgo or
// the reference server created has: operator commands that expect an
// existing sync database refuse one without it instead of creating the
// core tables in it. Reading only; it works on a store opened with
// Config.ReadOnly.
func (s *Store) HoldsCommitLog(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('sync_commits') IS NOT NULL`).Scan(&ok); err != nil {
		return false, fmt.Errorf("read the catalog: %w", err)
	}
	return ok, nil
}
