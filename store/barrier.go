package store

import (
	"context"

	"github.com/syncgo/syncgo/schema"
)

// The migration barrier (§2.4 "Same-version storage readiness" and
// "Schema upgrade writer fence", §10.2 sync.schema_not_ready): backfill
// checkpoints, the writer fence and the serve gate. A schema bump whose new
// version needs derived data declares checkpoints; until every checkpoint
// at the running version is activated, only the processes that declared it
// may serve, and the database itself rejects appends from older writers.

// Checkpoint states.
const (
	CheckpointDeclared    = "declared"
	CheckpointBackfilling = "backfilling"
	CheckpointActivated   = "activated"
)

// CheckpointDeclaration is a process's declaration of a checkpoint it
// serves through while it is incomplete.
type CheckpointDeclaration struct {
	Partition     string
	Name          string
	SchemaVersion int32
}

// Checkpoint is the durable state of a backfill checkpoint.
type Checkpoint struct {
	Partition     string
	Name          string
	SchemaVersion int32
	State         string
	// Watermark is the highest source commit sequence the projection is
	// derived from.
	Watermark int64
	// OwnerEpoch is the claim counter, the fencing token of backfillers.
	OwnerEpoch   int64
	ObservedRows int64
	UpdatedAtMs  int64
}

// CheckpointRef names a checkpoint.
type CheckpointRef struct {
	Partition string
	Name      string
}

// ServeGate is the state the serve gate decides on, read in one go and
// never cached: the stored schema version (0 without a marker), the
// partition's log epoch ("" when unknown), and every checkpoint at the
// running version, in any partition, that is not activated.
type ServeGate struct {
	StoredSchemaVersion int32
	LogEpoch            string
	Pending             []CheckpointRef
	// WriterFence is the partition's writer fence: the lowest schema
	// version whose commits it accepts (0 without a fence).
	WriterFence int32
}

// Activation is the result of ActivateCheckpoint.
type Activation string

// Activation results.
const (
	Activated    Activation = "activated"
	Stale        Activation = "stale"
	Unverifiable Activation = "unverifiable"
)

// Coverage is the result of HasSourceChangesAbove.
type Coverage string

// Coverage results.
const (
	CoverageClean        Coverage = "clean"
	CoverageChanged      Coverage = "changed"
	CoverageUnverifiable Coverage = "unverifiable"
)

// Barrier is the migration-barrier part of a store. Both drivers
// implement it; a store without it serves with no barrier.
type Barrier interface {
	// EnsureSchemaWith is EnsureSchema with this process's checkpoint
	// declarations: it refuses (CodeCheckpointIncomplete) when a checkpoint
	// at the schema's version is incomplete and not declared here, and on a
	// schema bump it installs the declarations (rows and fence) in the bump
	// transaction and raises every partition's fence to the new version.
	EnsureSchemaWith(ctx context.Context, s *schema.Compiled, decls []CheckpointDeclaration) error
	// DeclareCheckpoint inserts a checkpoint as declared (a no-op when it
	// exists) and raises the partition's writer fence to its schema
	// version, in one transaction; the fence never goes down.
	DeclareCheckpoint(ctx context.Context, d CheckpointDeclaration, nowMs int64) (Checkpoint, error)
	// ClaimCheckpoint gives the checkpoint a new owner epoch and moves it
	// to backfilling, unless it is activated; CodeCheckpointNotDeclared
	// when absent.
	ClaimCheckpoint(ctx context.Context, partition, name string, nowMs int64) (Checkpoint, error)
	// AdvanceCheckpoint records progress when ownerEpoch is still the
	// checkpoint's (compare-and-set); false, writing nothing, otherwise.
	AdvanceCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error)
	// ActivateCheckpoint activates under the partition's write boundary:
	// CodeCheckpointFenceMissing without a fence at its version; Stale when
	// a source table changed above watermark or ownerEpoch is superseded;
	// Unverifiable when the history above watermark was pruned.
	ActivateCheckpoint(ctx context.Context, partition, name string, ownerEpoch, watermark int64, sources []string, nowMs int64) (Activation, error)
	// ReadCheckpoints lists a partition's checkpoints by name.
	ReadCheckpoints(ctx context.Context, partition string) ([]Checkpoint, error)
	// ReadServeGate reads the serve gate for a partition and the running
	// schema version.
	ReadServeGate(ctx context.Context, partition string, running int32) (ServeGate, error)
	// SourceCoverageSeq returns the newest commit sequence that changed a
	// source table, the watermark a backfill must reach.
	SourceCoverageSeq(ctx context.Context, partition string, sources []string) (int64, error)
	// HasSourceChangesAbove reports whether a source table changed above
	// seq, or whether that cannot be known because the horizon passed seq.
	HasSourceChangesAbove(ctx context.Context, partition string, sources []string, seq int64) (Coverage, error)
}

// BarrierTx is the migration-barrier part of a write transaction.
type BarrierTx interface {
	// ServeGate reads the serve gate on the transaction's connection,
	// after the partition lock.
	ServeGate(ctx context.Context, running int32) (ServeGate, error)
	// AdvanceCheckpoint is Barrier.AdvanceCheckpoint inside the
	// transaction, so a backfill batch commits its rows and its progress
	// together, or nothing when superseded.
	AdvanceCheckpoint(ctx context.Context, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error)
}
