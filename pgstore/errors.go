package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

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

// SQLSTATEs of a server that ends the session: the backend was terminated
// (pg_terminate_backend, a fast shutdown, a failover), crashed with
// another backend, or is not accepting connections yet.
const (
	sqlstateAdminShutdown    = "57P01"
	sqlstateCrashShutdown    = "57P02"
	sqlstateCannotConnectNow = "57P03"
	sqlstateIdleSession      = "57P05"
	// sqlstateClassConnection is the class of connection exceptions: a
	// pooler (PgBouncer) answers with one when its server connection was
	// lost ("server conn crashed?").
	sqlstateClassConnection = "08"
)

// connLost reports whether err is the loss of the connection a statement
// ran on, rather than an answer of the database: the statement was never
// sent (pgconn.SafeToRetry), the server ended the session (57P01 admin
// shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 57P05 idle
// session timeout), a pooler lost its server connection (class 08), or the
// socket failed (EOF, a reset, a closed connection). A timeout or a
// cancelled context is not a lost connection: the caller gave up.
func connLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return sessionEnded(pgErr) || strings.HasPrefix(pgErr.Code, sqlstateClassConnection)
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return strings.Contains(err.Error(), "conn closed")
}

// sessionEnded reports whether a server error ended the session.
func sessionEnded(pgErr *pgconn.PgError) bool {
	switch pgErr.Code {
	case sqlstateAdminShutdown, sqlstateCrashShutdown, sqlstateCannotConnectNow, sqlstateIdleSession:
		return true
	}
	return false
}

// serverEnded reports whether err is the server's own report that it
// ended the session (sessionEnded): the statement it answers did not
// complete, and none sent after it on the connection ran.
func serverEnded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && sessionEnded(pgErr)
}

// safeToRetry is pgconn.SafeToRetry: the statement was never sent.
func safeToRetry(err error) bool { return pgconn.SafeToRetry(err) }
