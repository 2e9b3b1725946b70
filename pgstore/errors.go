package pgstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/store"
)

// SQLSTATEs the driver translates.
const (
	sqlstateUniqueViolation = "23505"
	sqlstateRaiseException  = "P0001"
)

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
