package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/syncgo/syncgo/store"
)

// The migration barrier (store.Barrier, store.BarrierTx): backfill
// checkpoints in sync_backfill_checkpoints, the writer fence in
// sync_writer_fence (enforced by the sync_commits_writer_fence trigger of
// migrations/001_core.sql), and the serve gate. Every write runs on the
// single writer, which is also the partition write boundary of every
// partition; reads that must be consistent are single statements.

var (
	_ store.Barrier   = (*Store)(nil)
	_ store.BarrierTx = (*writeTx)(nil)
)

const selectCheckpoint = `SELECT partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms
FROM sync_backfill_checkpoints`

type scanner interface{ Scan(dest ...any) error }

func scanCheckpoint(r scanner) (store.Checkpoint, error) {
	var c store.Checkpoint
	err := r.Scan(&c.Partition, &c.Name, &c.SchemaVersion, &c.State, &c.Watermark, &c.OwnerEpoch, &c.ObservedRows, &c.UpdatedAtMs)
	return c, err
}

func checkpointNotDeclared(partition, name string) error {
	return &store.Error{Code: store.CodeCheckpointNotDeclared, Message: "no such backfill checkpoint",
		Details: map[string]any{"partition": partition, "name": name}}
}

// installCheckpoint inserts a declared checkpoint unless it exists and
// raises the partition's fence to its version, never lowering it: shared by
// DeclareCheckpoint and the schema bump, so that both commit the row and
// its fence together.
func installCheckpoint(c *conn, d store.CheckpointDeclaration, nowMs int64) error {
	if err := c.exec(`INSERT INTO sync_backfill_checkpoints(partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms)
VALUES (?, ?, ?, 'declared', 0, 0, 0, ?) ON CONFLICT(partition, name) DO NOTHING`, d.Partition, d.Name, d.SchemaVersion, nowMs); err != nil {
		return fmt.Errorf("install checkpoint: %w", err)
	}
	if err := c.exec(`INSERT INTO sync_writer_fence(partition, required_writer_version) VALUES (?, ?)
ON CONFLICT(partition) DO UPDATE SET required_writer_version = MAX(required_writer_version, excluded.required_writer_version)`,
		d.Partition, d.SchemaVersion); err != nil {
		return fmt.Errorf("raise writer fence: %w", err)
	}
	return nil
}

// raiseAllFences raises the fence of every known partition (with commits or
// registered) to version, never lowering one.
func raiseAllFences(c *conn, version int32) error {
	err := c.exec(`INSERT INTO sync_writer_fence(partition, required_writer_version)
SELECT partition, ? FROM (SELECT partition FROM sync_partitions UNION SELECT partition FROM sync_partition_registry) WHERE true
ON CONFLICT(partition) DO UPDATE SET required_writer_version = MAX(required_writer_version, excluded.required_writer_version)`, version)
	if err != nil {
		return fmt.Errorf("raise writer fences: %w", err)
	}
	return nil
}

func readCheckpointOn(c *conn, partition, name string) (store.Checkpoint, error) {
	cp, err := scanCheckpoint(c.queryRow(selectCheckpoint+" WHERE partition=? AND name=?", partition, name))
	if errors.Is(err, errNoRows) {
		return store.Checkpoint{}, checkpointNotDeclared(partition, name)
	}
	return cp, err
}

// DeclareCheckpoint inserts the checkpoint as declared (a no-op when it
// exists) and raises the partition's fence to its version.
func (s *Store) DeclareCheckpoint(ctx context.Context, d store.CheckpointDeclaration, nowMs int64) (store.Checkpoint, error) {
	var cp store.Checkpoint
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		if err := installCheckpoint(c, d, nowMs); err != nil {
			return err
		}
		var err error
		cp, err = readCheckpointOn(c, d.Partition, d.Name)
		return err
	})
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("declare checkpoint: %w", err)
	}
	return cp, nil
}

// ClaimCheckpoint gives the checkpoint a new owner epoch and moves it to
// backfilling; an activated checkpoint is returned unchanged.
func (s *Store) ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (store.Checkpoint, error) {
	var cp store.Checkpoint
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		err := c.exec(`UPDATE sync_backfill_checkpoints
SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = ?
WHERE partition=? AND name=? AND state <> 'activated'`, nowMs, partition, name)
		if err != nil {
			return err
		}
		cp, err = readCheckpointOn(c, partition, name)
		return err
	})
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("claim checkpoint: %w", err)
	}
	return cp, nil
}

const advanceCheckpoint = `UPDATE sync_backfill_checkpoints SET watermark=?, observed_rows=?, updated_at_ms=?
WHERE partition=? AND name=? AND owner_epoch=?`

func advanceOn(c *conn, partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	n, err := c.execChanges(advanceCheckpoint, watermark, observedRows, nowMs, partition, name, ownerEpoch)
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return n == 1, nil
}

// AdvanceCheckpoint records progress when ownerEpoch is still the
// checkpoint's.
func (s *Store) AdvanceCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	var ok bool
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		var err error
		ok, err = advanceOn(c, partition, name, ownerEpoch, watermark, observedRows, nowMs)
		return err
	})
	return ok, err
}

// ActivateCheckpoint activates the checkpoint in one writer function: the
// fence check, the coverage check above the watermark and the
// compare-and-set see the same state, and no append interleaves.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark int64, sources []string, nowMs int64) (store.Activation, error) {
	var out store.Activation
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		cp, err := readCheckpointOn(c, partition, name)
		if err != nil {
			return err
		}
		var fence nullInt64
		err = c.queryRow("SELECT required_writer_version FROM sync_writer_fence WHERE partition=?", partition).Scan(&fence)
		if err != nil && !errors.Is(err, errNoRows) {
			return err
		}
		if !fence.Valid || fence.Int64 < int64(cp.SchemaVersion) {
			// Without the fence, old writers could still decay what the
			// activation would certify.
			return &store.Error{Code: store.CodeCheckpointFenceMissing, Message: "the partition has no writer fence at the checkpoint's version",
				Details: map[string]any{"partition": partition, "name": name}}
		}
		cov, err := coverageOn(c, partition, sources, watermark)
		if err != nil {
			return err
		}
		switch cov {
		case store.CoverageChanged:
			out = store.Stale
			return nil
		case store.CoverageUnverifiable:
			out = store.Unverifiable
			return nil
		}
		n, err := c.execChanges(`UPDATE sync_backfill_checkpoints SET state='activated', watermark=?, updated_at_ms=?
WHERE partition=? AND name=? AND owner_epoch=? AND state <> 'activated'`, watermark, nowMs, partition, name, ownerEpoch)
		if err != nil {
			return err
		}
		if n == 1 {
			out = store.Activated
		} else {
			out = store.Stale
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	return out, nil
}

// ReadCheckpoints lists a partition's checkpoints by name.
func (s *Store) ReadCheckpoints(ctx context.Context, partition string) ([]store.Checkpoint, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	var out []store.Checkpoint
	err := s.read(ctx, func(c *conn) error {
		rows, err := c.query(selectCheckpoint+" WHERE partition=? ORDER BY name", partition)
		if isNoSuchTable(err) {
			return nil // a read-only store on a database without the table: none
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			cp, err := scanCheckpoint(rows)
			if err != nil {
				return err
			}
			out = append(out, cp)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	return out, nil
}

// The serve gate in one statement, so that its parts come from one
// snapshot.
const selectServeGate = `SELECT COALESCE((SELECT schema_version FROM sync_schema_meta WHERE id=1), 0),
  COALESCE((SELECT required_writer_version FROM sync_writer_fence WHERE partition=?), 0),
  COALESCE((SELECT log_epoch FROM sync_partition_registry WHERE partition=?), ''),
  (SELECT json_group_array(json_array(partition, name)) FROM
    (SELECT partition, name FROM sync_backfill_checkpoints WHERE schema_version=? AND state <> 'activated' ORDER BY partition, name))`

// serveGateWithout is the serve gate statement of a database that lacks
// some of its tables: one that never had EnsureSchema has no
// sync_schema_meta, and one that only read-only stores have opened may
// lack the core tables a read-write open adds (the reference's before
// 0.23). A missing table reads as its default.
func serveGateWithout(c *conn, partition string, running int32) (string, []any, error) {
	have := map[string]bool{}
	rows, err := c.query(`SELECT name FROM sqlite_master WHERE type='table'`)
	if err != nil {
		return "", nil, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return "", nil, err
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return "", nil, err
	}
	var (
		parts []string
		args  []any
	)
	part := func(table, expr, missing string, arg any) {
		if !have[table] {
			parts = append(parts, missing)
			return
		}
		parts = append(parts, expr)
		if arg != nil {
			args = append(args, arg)
		}
	}
	part("sync_schema_meta", "COALESCE((SELECT schema_version FROM sync_schema_meta WHERE id=1), 0)", "0", nil)
	part("sync_writer_fence", "COALESCE((SELECT required_writer_version FROM sync_writer_fence WHERE partition=?), 0)", "0", partition)
	part("sync_partition_registry", "COALESCE((SELECT log_epoch FROM sync_partition_registry WHERE partition=?), '')", "''", partition)
	part("sync_backfill_checkpoints", `(SELECT json_group_array(json_array(partition, name)) FROM
    (SELECT partition, name FROM sync_backfill_checkpoints WHERE schema_version=? AND state <> 'activated' ORDER BY partition, name))`, "'[]'", running)
	return "SELECT " + strings.Join(parts, ",\n  "), args, nil
}

func serveGateOn(c *conn, partition string, running int32) (store.ServeGate, error) {
	var g store.ServeGate
	var pending string
	err := c.queryRow(selectServeGate, partition, partition, running).Scan(&g.StoredSchemaVersion, &g.WriterFence, &g.LogEpoch, &pending)
	if isNoSuchTable(err) {
		var (
			query string
			args  []any
		)
		if query, args, err = serveGateWithout(c, partition, running); err == nil {
			err = c.queryRow(query, args...).Scan(&g.StoredSchemaVersion, &g.WriterFence, &g.LogEpoch, &pending)
		}
	}
	if err != nil {
		return store.ServeGate{}, fmt.Errorf("read serve gate: %w", err)
	}
	if pending == "[]" { // no pending checkpoint: the common case, every request
		return g, nil
	}
	var refs [][2]string
	if err := json.Unmarshal([]byte(pending), &refs); err != nil {
		return store.ServeGate{}, fmt.Errorf("read serve gate: %w", err)
	}
	for _, r := range refs {
		g.Pending = append(g.Pending, store.CheckpointRef{Partition: r[0], Name: r[1]})
	}
	return g, nil
}

// ReadServeGate reads the serve gate for a partition and the running
// schema version.
func (s *Store) ReadServeGate(ctx context.Context, partition string, running int32) (store.ServeGate, error) {
	if s.closed.Load() {
		return store.ServeGate{}, store.ErrClosed
	}
	var g store.ServeGate
	err := s.read(ctx, func(c *conn) error {
		var err error
		g, err = serveGateOn(c, partition, running)
		return err
	})
	return g, err
}

// SourceCoverageSeq returns the newest commit sequence that changed a
// source table.
func (s *Store) SourceCoverageSeq(ctx context.Context, partition string, sources []string) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	// Newest first on sync_changes_by_table: the scan stops at the newest
	// source change.
	var seq int64
	err := s.read(ctx, func(c *conn) error {
		err := c.queryRow(`SELECT commit_seq FROM sync_changes
WHERE partition=? AND tbl IN (SELECT value FROM json_each(?)) ORDER BY commit_seq DESC LIMIT 1`, partition, jsonList(sources)).Scan(&seq)
		if errors.Is(err, errNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("source coverage: %w", err)
	}
	return seq, nil
}

// coverageOn reads the horizon and the source changes above seq in one
// statement: a horizon past seq means the history that would answer is
// gone, so an empty scan is unverifiable rather than clean.
func coverageOn(c *conn, partition string, sources []string, seq int64) (store.Coverage, error) {
	if len(sources) == 0 {
		return store.CoverageClean, nil
	}
	var horizon int64
	var changed bool
	err := c.queryRow(`SELECT COALESCE((SELECT horizon_seq FROM sync_partitions WHERE partition=?), 0),
  EXISTS (SELECT 1 FROM sync_changes WHERE partition=? AND commit_seq > ? AND tbl IN (SELECT value FROM json_each(?)))`,
		partition, partition, seq, jsonList(sources)).Scan(&horizon, &changed)
	switch {
	case err != nil:
		return "", fmt.Errorf("source changes: %w", err)
	case changed:
		return store.CoverageChanged, nil
	case horizon > seq:
		return store.CoverageUnverifiable, nil
	}
	return store.CoverageClean, nil
}

// HasSourceChangesAbove reports whether a source table changed above seq,
// or that this cannot be known because the horizon passed seq.
func (s *Store) HasSourceChangesAbove(ctx context.Context, partition string, sources []string, seq int64) (store.Coverage, error) {
	if s.closed.Load() {
		return "", store.ErrClosed
	}
	if len(sources) == 0 {
		return store.CoverageClean, nil
	}
	var cov store.Coverage
	err := s.read(ctx, func(c *conn) error {
		var err error
		cov, err = coverageOn(c, partition, sources, seq)
		return err
	})
	return cov, err
}

// ServeGate reads the serve gate on the writer's connection, inside the
// transaction.
func (tx *writeTx) ServeGate(ctx context.Context, running int32) (store.ServeGate, error) {
	if err := ctx.Err(); err != nil {
		return store.ServeGate{}, err
	}
	// Read once per batch (batchcache.go): only the batch's own
	// statements could change it before COMMIT, and any that may forgets it.
	w := tx.s.w
	if g, ok := w.cache.gate(tx.partition, running); ok {
		return g, nil
	}
	defer tx.c.enterHot().exitHot()
	g, err := serveGateOn(tx.c, tx.partition, running)
	if err != nil {
		return store.ServeGate{}, err
	}
	w.cache.keepGate(tx.partition, running, g)
	return g, nil
}

// AdvanceCheckpoint is Barrier.AdvanceCheckpoint inside the transaction:
// the progress commits or rolls back with the batch.
func (tx *writeTx) AdvanceCheckpoint(ctx context.Context, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return advanceOn(tx.c, tx.partition, name, ownerEpoch, watermark, observedRows, nowMs)
}
