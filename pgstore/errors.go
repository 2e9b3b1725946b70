package pgstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/store"
)

// SQLSTATEs the driver translates.
const (
	sqlstateUniqueViolation = "23505"
	sqlstateRaiseException  = "P0001"
	sqlstateDiskFull        = "53100"
)

// storageFull marks a write that failed because the database server ran
// out of disk (53100 disk_full) with store.ErrStorageFull, as the SQLite
// driver does for SQLITE_FULL: the engine then keeps serving reads and
// answers writes with a retryable error. Other errors pass through.
func storageFull(err error) error {
	var pgErr *pgconn.PgError
	if err != nil && errors.As(err, &pgErr) && pgErr.Code == sqlstateDiskFull && !errors.Is(err, store.ErrStorageFull) {
		return fmt.Errorf("%w: %w", store.ErrStorageFull, err)
	}
	return err
}

// fenceError translates the writer fence trigger's exception into its
// storage code; other errors pass through.
func fenceError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateRaiseException && pgErr.Message == store.CodeWriterFenceRejected {
		return &store.Error{
			Code:    store.CodeWriterFenceRejected,
			Message: "the partition's writer fence requires a newer schema version",
			Err:     err,
		}
	}
	return err
}

// constraintError translates a violated declared unique index of ts into a
// *store.ConstraintError; other errors pass through.
func (ts *tableSQL) constraintError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateUniqueViolation {
		return err
	}
	name, ok := ts.constraints[pgErr.ConstraintName]
	if !ok {
		return err
	}
	return &store.ConstraintError{Table: ts.name, Constraint: name, Err: err}
}
