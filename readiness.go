package syncgo

import (
	"errors"
	"fmt"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
)

// Readiness phases: what a server that refuses to start was doing (§2.4).
const (
	// PhaseSchemaCompile: the schema did not compile. A Server never
	// reports it (New takes a compiled schema); it names the phase for
	// a host that compiles its schema at boot and reports readiness
	// itself.
	PhaseSchemaCompile = "schema_compile"
	// PhaseStorageMigration: Start failed to prepare the storage, or
	// another process stored a newer schema version than this one runs.
	PhaseStorageMigration = "storage_migration"
	// PhaseBackfillCheckpoint: a backfill checkpoint this process did not
	// declare is not activated.
	PhaseBackfillCheckpoint = "backfill_checkpoint"
)

// ReadinessError reports why a server is not ready to serve: the phase it
// failed in and the cause. Requests to a server that is not ready are
// answered sync.schema_not_ready with the phase in the details.
type ReadinessError struct {
	Phase string
	Err   error
}

// Error names the phase and the cause.
func (e *ReadinessError) Error() string {
	return fmt.Sprintf("syncgo: not ready (%s): %v", e.Phase, e.Err)
}

// Unwrap returns the cause.
func (e *ReadinessError) Unwrap() error { return e.Err }

// readinessPhase classifies a start failure.
func readinessPhase(err error) string {
	if store.ErrorCode(err) == store.CodeCheckpointIncomplete {
		return PhaseBackfillCheckpoint
	}
	return PhaseStorageMigration
}

// notReadyError is the answer to a request while the server is not ready.
func notReadyError(err error) *syncerr.Error {
	phase := PhaseStorageMigration
	var re *ReadinessError
	if errors.As(err, &re) {
		phase = re.Phase
	}
	details := map[string]string{"phase": phase}
	var se *store.Error
	if phase == PhaseBackfillCheckpoint && errors.As(err, &se) {
		// The checkpoint that keeps this process from serving.
		if p, ok := se.Details["partition"].(string); ok {
			details["partition"] = p
		}
		if n, ok := se.Details["name"].(string); ok {
			details["projection"] = n
		}
	}
	return syncerr.New(syncerr.CodeSchemaNotReady, "server schema is not ready for this request").
		WithDetails(details)
}
