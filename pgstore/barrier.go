package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// The migration barrier (store.Barrier, store.BarrierTx): backfill
// checkpoints in sync_backfill_checkpoints, the writer fence in
// sync_writer_fence (enforced by the sync_commits_writer_fence trigger of
// migrations/002_writer_fence.sql), and the serve gate. The partition
// write boundary is the sync_partitions row lock of Write; a schema bump
// excludes every writer with LOCK TABLE sync_partitions (migrate_schema.go).

var (
	_ store.Barrier   = (*Store)(nil)
	_ store.BarrierTx = (*writeTx)(nil)
)

const (
	checkpointColumns = `partition, name, schema_version, state, watermark, owner_epoch, observed_rows, updated_at_ms`

	sqlCheckpoint  = `SELECT ` + checkpointColumns + ` FROM sync_backfill_checkpoints WHERE partition = $1 AND name = $2`
	sqlCheckpoints = `SELECT ` + checkpointColumns + ` FROM sync_backfill_checkpoints WHERE partition = $1 ORDER BY name`

	// sqlInstallCheckpoint inserts a declared checkpoint unless it exists;
	// sqlRaiseFence raises the partition's fence to a version, never
	// lowering it. DeclareCheckpoint and the schema bump run both in one
	// transaction, so the row and its fence become visible together.
	sqlInstallCheckpoint = `INSERT INTO sync_backfill_checkpoints(` + checkpointColumns + `)
VALUES ($1, $2, $3, 'declared', 0, 0, 0, $4)
ON CONFLICT (partition, name) DO NOTHING`
	sqlRaiseFence = `INSERT INTO sync_writer_fence(partition, required_writer_version) VALUES ($1, $2)
ON CONFLICT (partition) DO UPDATE SET required_writer_version =
  GREATEST(sync_writer_fence.required_writer_version, EXCLUDED.required_writer_version)`

	// sqlRaiseAllFences raises the fence of every known partition (with a
	// commit-log row or a registry entry) to $1, never lowering one.
	sqlRaiseAllFences = `INSERT INTO sync_writer_fence(partition, required_writer_version)
SELECT p.partition, $1 FROM (SELECT partition FROM sync_partitions UNION SELECT partition FROM sync_partition_registry) p
ON CONFLICT (partition) DO UPDATE SET required_writer_version =
  GREATEST(sync_writer_fence.required_writer_version, EXCLUDED.required_writer_version)`

	// sqlClaimCheckpoint gives a new owner epoch under the row lock of the
	// UPDATE, so concurrent claimers get distinct epochs.
	sqlClaimCheckpoint = `UPDATE sync_backfill_checkpoints
   SET owner_epoch = owner_epoch + 1, state = 'backfilling', updated_at_ms = $3
 WHERE partition = $1 AND name = $2 AND state <> 'activated'
RETURNING ` + checkpointColumns

	sqlAdvanceCheckpoint = `UPDATE sync_backfill_checkpoints SET watermark = $4, observed_rows = $5, updated_at_ms = $6
 WHERE partition = $1 AND name = $2 AND owner_epoch = $3`

	// sqlActivationState reads, after the partition lock, everything the
	// activation decides on: the checkpoint's version, the fence, the
	// horizon and whether a source table changed above the watermark. No
	// row: the checkpoint is not declared.
	sqlActivationState = `SELECT c.schema_version, f.required_writer_version,
       coalesce((SELECT horizon_seq FROM sync_partitions WHERE partition = $1), 0),
       EXISTS (SELECT 1 FROM sync_changes
                WHERE partition = $1 AND commit_seq > $3 AND tbl = ANY($4::text[]))
  FROM sync_backfill_checkpoints c
  LEFT JOIN sync_writer_fence f ON f.partition = c.partition
 WHERE c.partition = $1 AND c.name = $2`

	sqlActivateCheckpoint = `UPDATE sync_backfill_checkpoints SET state = 'activated', watermark = $4, updated_at_ms = $5
 WHERE partition = $1 AND name = $2 AND owner_epoch = $3 AND state <> 'activated'`

	// sqlServeGate is the serve gate in one statement, so that its three
	// parts come from one snapshot: the marker's version (0 without one),
	// the partition's epoch ('' without a registry entry), and the
	// incomplete checkpoints at the running version in every partition.
	sqlServeGate = `SELECT coalesce((SELECT schema_version FROM sync_schema_meta WHERE id = 1), 0),
       coalesce((SELECT required_writer_version FROM sync_writer_fence WHERE partition = $1), 0),
       coalesce((SELECT log_epoch FROM sync_partition_registry WHERE partition = $1), ''),
       coalesce(p.partitions, '{}'), coalesce(p.names, '{}')
  FROM (SELECT array_agg(partition ORDER BY partition, name) AS partitions, array_agg(name ORDER BY partition, name) AS names
          FROM sync_backfill_checkpoints WHERE schema_version = $2 AND state <> 'activated') p`

	// sqlSourceCoverageSeq is the newest commit that changed a source
	// table: a backward scan of sync_changes_by_table.
	sqlSourceCoverageSeq = `SELECT coalesce((SELECT commit_seq FROM sync_changes
  WHERE partition = $1 AND tbl = ANY($2::text[]) ORDER BY commit_seq DESC LIMIT 1), 0)`

	// sqlCoverage reads the horizon and the source changes above $2 in one
	// statement.
	sqlCoverage = `SELECT coalesce((SELECT horizon_seq FROM sync_partitions WHERE partition = $1), 0),
       EXISTS (SELECT 1 FROM sync_changes WHERE partition = $1 AND commit_seq > $2 AND tbl = ANY($3::text[]))`

	// sqlIncompleteCheckpoints are the checkpoints the barrier of
	// EnsureSchemaWith looks at.
	sqlIncompleteCheckpoints = `SELECT partition, name FROM sync_backfill_checkpoints
 WHERE schema_version = $1 AND state <> 'activated' ORDER BY partition, name`
)

func scanCheckpoint(r pgx.Row) (store.Checkpoint, error) {
	var c store.Checkpoint
	err := r.Scan(&c.Partition, &c.Name, &c.SchemaVersion, &c.State, &c.Watermark, &c.OwnerEpoch, &c.ObservedRows, &c.UpdatedAtMs)
	return c, err
}

func checkpointNotDeclared(partition, name string) error {
	return &store.Error{Code: store.CodeCheckpointNotDeclared, Message: "no such backfill checkpoint",
		Details: map[string]any{"partition": partition, "name": name}}
}

// DeclareCheckpoint inserts the checkpoint as declared (a no-op when it
// exists) and raises the partition's fence to its version, in one
// pipelined batch that Postgres runs as one implicit transaction; the
// checkpoint is read back by a third statement of it, with a snapshot that
// sees a concurrent declaration of the same checkpoint. It takes no lock:
// it writes no app rows and no marker.
func (s *Store) DeclareCheckpoint(ctx context.Context, d store.CheckpointDeclaration, nowMs int64) (store.Checkpoint, error) {
	if err := s.checkWrite(); err != nil {
		return store.Checkpoint{}, err
	}
	b := &pgx.Batch{}
	b.Queue(sqlInstallCheckpoint, d.Partition, d.Name, d.SchemaVersion, nowMs)
	b.Queue(sqlRaiseFence, d.Partition, d.SchemaVersion)
	b.Queue(sqlCheckpoint, d.Partition, d.Name)
	br := s.pool.SendBatch(ctx, b)
	var cp store.Checkpoint
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		cp, err = scanCheckpoint(br.QueryRow())
	}
	if err = closeBatch(br, err); err != nil {
		return store.Checkpoint{}, fmt.Errorf("declare checkpoint: %w", err)
	}
	return cp, nil
}

// ClaimCheckpoint gives the checkpoint a new owner epoch and moves it to
// backfilling, in one UPDATE; an activated checkpoint is returned
// unchanged.
func (s *Store) ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (store.Checkpoint, error) {
	if err := s.checkWrite(); err != nil {
		return store.Checkpoint{}, err
	}
	cp, err := scanCheckpoint(s.pool.QueryRow(ctx, sqlClaimCheckpoint, partition, name, nowMs))
	if errors.Is(err, pgx.ErrNoRows) {
		// Absent, or activated: a second statement tells which.
		cp, err = scanCheckpoint(s.pool.QueryRow(ctx, sqlCheckpoint, partition, name))
		if errors.Is(err, pgx.ErrNoRows) {
			err = checkpointNotDeclared(partition, name)
		}
	}
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("claim checkpoint: %w", err)
	}
	return cp, nil
}

// AdvanceCheckpoint records progress when ownerEpoch is still the
// checkpoint's (compare-and-set).
func (s *Store) AdvanceCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, sqlAdvanceCheckpoint, partition, name, ownerEpoch, watermark, observedRows, nowMs)
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ActivateCheckpoint activates the checkpoint in one transaction under the
// partition's row lock (the write boundary of Write), so that no append to
// the partition interleaves between the checks and the compare-and-set: a
// round trip with BEGIN, the lock and the checks (sqlActivationState), and
// one with the CAS and COMMIT.
func (s *Store) ActivateCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark int64, sources []string, nowMs int64) (store.Activation, error) {
	if err := s.checkWrite(); err != nil {
		return "", err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: acquire connection: %w", err)
	}
	defer conn.Release()
	tx := newBatch(s, conn, ctx, partition, false)
	defer tx.rollback() // no-op after a commit
	tx.lockPartition()
	br, err := tx.send(ctx, nil, func(b *pgx.Batch) {
		b.Queue(sqlActivationState, partition, name, watermark, nonNilStrings(sources))
	})
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	var (
		version int32
		fence   *int32
		horizon int64
		changed bool
	)
	err = br.QueryRow().Scan(&version, &fence, &horizon, &changed)
	if errors.Is(err, pgx.ErrNoRows) {
		err = checkpointNotDeclared(partition, name)
	}
	if err = closeBatch(br, err); err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	switch {
	case fence == nil || *fence < version:
		// Without the fence, old writers could still decay what the
		// activation would certify.
		return "", fmt.Errorf("activate checkpoint: %w", &store.Error{Code: store.CodeCheckpointFenceMissing,
			Message: "the partition has no writer fence at the checkpoint's version",
			Details: map[string]any{"partition": partition, "name": name}})
	case len(sources) == 0:
	case changed:
		return store.Stale, nil
	case horizon > watermark:
		return store.Unverifiable, nil
	}
	br, err = tx.send(ctx, nil, func(b *pgx.Batch) {
		b.Queue(sqlActivateCheckpoint, partition, name, ownerEpoch, watermark, nowMs)
		b.Queue("COMMIT")
	})
	if err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	tag, err := br.Exec()
	activated := tag.RowsAffected() == 1
	if err == nil {
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = errors.New("the transaction was rolled back")
		}
	}
	if err = closeBatch(br, err); err != nil {
		return "", fmt.Errorf("activate checkpoint: %w", err)
	}
	tx.done = true
	if !activated {
		return store.Stale, nil
	}
	return store.Activated, nil
}

// ReadCheckpoints lists a partition's checkpoints by name.
func (s *Store) ReadCheckpoints(ctx context.Context, partition string) ([]store.Checkpoint, error) {
	return retry(s, ctx, "ReadCheckpoints", func() ([]store.Checkpoint, error) { return s.readCheckpointsOnce(ctx, partition) })
}

// readCheckpointsOnce is ReadCheckpoints, once (see "Lost connections", retry.go).
func (s *Store) readCheckpointsOnce(ctx context.Context, partition string) ([]store.Checkpoint, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sqlCheckpoints, partition)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Checkpoint, error) { return scanCheckpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	return out, nil
}

// readServeGate scans sqlServeGate.
func readServeGate(r pgx.Row) (store.ServeGate, error) {
	var (
		g                 store.ServeGate
		version           int64
		partitions, names []string
	)
	var fence int64 // INTEGER in the reference's DDL, BIGINT in older ones
	if err := r.Scan(&version, &fence, &g.LogEpoch, &partitions, &names); err != nil {
		return store.ServeGate{}, fmt.Errorf("read serve gate: %w", err)
	}
	g.StoredSchemaVersion, g.WriterFence = int32(version), int32(fence)
	for i := range partitions {
		g.Pending = append(g.Pending, store.CheckpointRef{Partition: partitions[i], Name: names[i]})
	}
	return g, nil
}

// ReadServeGate reads the serve gate for a partition and the running
// schema version, in one statement.
func (s *Store) ReadServeGate(ctx context.Context, partition string, running int32) (store.ServeGate, error) {
	return retry(s, ctx, "ReadServeGate", func() (store.ServeGate, error) { return s.readServeGateOnce(ctx, partition, running) })
}

// readServeGateOnce is ReadServeGate, once (see "Lost connections", retry.go).
func (s *Store) readServeGateOnce(ctx context.Context, partition string, running int32) (store.ServeGate, error) {
	if err := s.check(); err != nil {
		return store.ServeGate{}, err
	}
	return readServeGate(s.pool.QueryRow(ctx, sqlServeGate, partition, running))
}

// SourceCoverageSeq returns the newest commit sequence that changed a
// source table, or 0.
func (s *Store) SourceCoverageSeq(ctx context.Context, partition string, sources []string) (int64, error) {
	return retry(s, ctx, "SourceCoverageSeq", func() (int64, error) { return s.sourceCoverageSeqOnce(ctx, partition, sources) })
}

// sourceCoverageSeqOnce is SourceCoverageSeq, once (see "Lost connections", retry.go).
func (s *Store) sourceCoverageSeqOnce(ctx context.Context, partition string, sources []string) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var seq int64
	if err := s.pool.QueryRow(ctx, sqlSourceCoverageSeq, partition, nonNilStrings(sources)).Scan(&seq); err != nil {
		return 0, fmt.Errorf("source coverage: %w", err)
	}
	return seq, nil
}

// HasSourceChangesAbove reports whether a source table changed above seq,
// or that this cannot be known because the horizon passed seq: the
// horizon and the scan come from one statement, so an empty scan of a
// pruned window is unverifiable rather than clean.
func (s *Store) HasSourceChangesAbove(ctx context.Context, partition string, sources []string, seq int64) (store.Coverage, error) {
	return retry(s, ctx, "HasSourceChangesAbove", func() (store.Coverage, error) { return s.hasSourceChangesAboveOnce(ctx, partition, sources, seq) })
}

// hasSourceChangesAboveOnce is HasSourceChangesAbove, once (see "Lost connections", retry.go).
func (s *Store) hasSourceChangesAboveOnce(ctx context.Context, partition string, sources []string, seq int64) (store.Coverage, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if len(sources) == 0 {
		return store.CoverageClean, nil
	}
	var (
		horizon int64
		changed bool
	)
	if err := s.pool.QueryRow(ctx, sqlCoverage, partition, seq, sources).Scan(&horizon, &changed); err != nil {
		return "", fmt.Errorf("source changes: %w", err)
	}
	switch {
	case changed:
		return store.CoverageChanged, nil
	case horizon > seq:
		return store.CoverageUnverifiable, nil
	}
	return store.CoverageClean, nil
}

// ServeGate reads the serve gate on the transaction's connection, in the
// round trip that carries the deferred BEGIN and partition lock (so after
// the lock, with a snapshot taken once the lock is held). It is read once
// per batch: the commits of a batch share the gate the first of them read
// (a schema bump waits for the batch's lock to be released, and the
// writer fence is enforced by the database at each append).
func (t *writeTx) ServeGate(ctx context.Context, running int32) (store.ServeGate, error) {
	if err := t.settle(ctx); err != nil {
		return store.ServeGate{}, fmt.Errorf("serve gate: %w", err)
	}
	if c := t.b.gate; c != nil && c.running == running && !t.done {
		if err := ctx.Err(); err != nil {
			return store.ServeGate{}, err
		}
		return c.gate, nil
	}
	br, err := t.send(ctx, func(b *pgx.Batch) { b.Queue(sqlServeGate, t.partition, running) })
	if err != nil {
		return store.ServeGate{}, fmt.Errorf("serve gate: %w", err)
	}
	g, err := readServeGate(br.QueryRow())
	if err = closeBatch(br, err); err != nil {
		return store.ServeGate{}, err
	}
	t.b.gate = &cachedGate{running: running, gate: g}
	return g, nil
}

// AdvanceCheckpoint is Barrier.AdvanceCheckpoint inside the transaction:
// the progress commits or rolls back with the batch.
func (t *writeTx) AdvanceCheckpoint(ctx context.Context, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	t.writes++
	br, err := t.send(ctx, func(b *pgx.Batch) {
		b.Queue(sqlAdvanceCheckpoint, t.partition, name, ownerEpoch, watermark, observedRows, nowMs)
	})
	if err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	tag, err := br.Exec()
	if err = closeBatch(br, err); err != nil {
		return false, fmt.Errorf("advance checkpoint: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// checkBarrier refuses when a checkpoint at version is incomplete and not
// declared by the caller; an empty declaration set declares nothing.
func checkBarrier(ctx context.Context, q querier, version int32, decls []store.CheckpointDeclaration) error {
	rows, err := q.Query(ctx, sqlIncompleteCheckpoints, version)
	if err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	var partition, name string
	_, err = pgx.ForEachRow(rows, []any{&partition, &name}, func() error {
		declared := slices.ContainsFunc(decls, func(d store.CheckpointDeclaration) bool {
			return d.Partition == partition && d.Name == name
		})
		if !declared {
			return &store.Error{Code: store.CodeCheckpointIncomplete, Message: "a backfill checkpoint at the running schema version is incomplete",
				Details: map[string]any{"partition": partition, "name": name}}
		}
		return nil
	})
	return err
}

// installCheckpoints installs declarations (rows and fences) and raises
// every partition's fence to version, on the schema bump's transaction.
func installCheckpoints(ctx context.Context, tx pgx.Tx, decls []store.CheckpointDeclaration, version int32, nowMs int64) error {
	b := &pgx.Batch{}
	for _, d := range decls {
		b.Queue(sqlInstallCheckpoint, d.Partition, d.Name, d.SchemaVersion, nowMs)
		b.Queue(sqlRaiseFence, d.Partition, d.SchemaVersion)
	}
	b.Queue(sqlRaiseAllFences, version)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("install checkpoints and fences: %w", err)
	}
	return nil
}

// nonNilStrings makes a nil list an empty array rather than NULL.
func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
