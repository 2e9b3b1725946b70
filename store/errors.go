package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/schema"
)

// Sentinel errors. Drivers wrap or return these; callers test with
// errors.Is.
var (
	// ErrNotFound: the record asked for does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrUnreadable: a stored record exists but cannot be decoded (for a
	// push result, the server answers sync.idempotency_cache_miss).
	ErrUnreadable = errors.New("store: stored record unreadable")
	// ErrEpochMismatch: the log epoch given with a prune or cursor update
	// is not the partition's current one.
	ErrEpochMismatch = errors.New("store: log epoch mismatch")
	// ErrClientBound: a client record is bound to another actor (PutClient
	// never rebinds a clientId).
	ErrClientBound = errors.New("store: clientId is bound to another actor")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrDeferFull: a ClientWriteBehind holds MaxDeferredClients records;
	// write the record synchronously.
	ErrDeferFull = errors.New("store: deferred client records at their bound")
	// ErrSchemaNewer: the database holds a newer schema version than the
	// running one (an older server against a migrated database).
	ErrSchemaNewer = errors.New("store: stored schema is newer than the running schema")
	// ErrNoSchema: a call needs the schema, and EnsureSchema has not run.
	ErrNoSchema = errors.New("store: schema not ensured")
	// ErrUnknownTable: the table is not in the ensured schema.
	ErrUnknownTable = errors.New("store: unknown table")
	// ErrScanRequiresScope: a row scan or commit window without scopes.
	ErrScanRequiresScope = errors.New("store: scan requires a scope filter")
	// ErrBoundariesOneKey: PageBoundaries of scopes of more than one key
	// (whose rows only a read of each row's scopes could match).
	ErrBoundariesOneKey = errors.New("store: page boundaries need exactly one scope key")
	// ErrStorageFull: a write failed because the storage is full (the
	// disk, or the database's size cap). Nothing of it was written; it may
	// succeed once space is freed.
	ErrStorageFull = errors.New("store: storage full")
)

// Storage error codes of the server's host storage surface (§10.2, "host
// storage codes", outside the wire catalog).
const (
	CodeWriterFenceRejected      = "sync.storage.writer_fence_rejected"
	CodeStoredLayoutMismatch     = "sync.storage.stored_layout_mismatch"
	CodePhysicalLayoutMismatch   = "sync.storage.physical_layout_mismatch"
	CodeCheckpointIncomplete     = "sync.storage.checkpoint_incomplete"
	CodeCheckpointNotDeclared    = "sync.storage.checkpoint_not_declared"
	CodeCheckpointFenceMissing   = "sync.storage.checkpoint_fence_missing"
	CodeSchemaMigrationPending   = "sync.storage.schema_migration_pending"
	CodeScanRequiresScope        = "sync.storage.scan_requires_scope"
	CodePruneEpochMismatch       = "sync.storage.prune_epoch_mismatch"
	CodeConstraintViolation      = "sync.storage.constraint_violation"
	CodeTransactionQueryRejected = "sync.storage.transaction_query_unsupported"
)

// Error is a storage failure with a host storage code and structured
// details (never prose with names in it).
type Error struct {
	Code    string
	Message string
	Details map[string]any
	Err     error
}

// Error renders the code, the message, the details (sorted by key) and
// the cause, so that a log line or a refused start names what it is about.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code + ": " + e.Message)
	if len(e.Details) > 0 {
		keys := slices.Sorted(maps.Keys(e.Details))
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%v", k, e.Details[k])
		}
		b.WriteString(")")
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the storage code of err, or "".
func ErrorCode(err error) string {
	var se *Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

// ConstraintError reports a relational constraint (a declared unique index)
// violated by a row write; the push answers sync.constraint_violation at
// the operation's index.
type ConstraintError struct {
	Table      string
	Constraint string
	Err        error
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("store: constraint %s violated on %s: %v", e.Constraint, e.Table, e.Err)
}

// Unwrap returns the driver's error.
func (e *ConstraintError) Unwrap() error { return e.Err }

// CheckStoredLayout compares a database's stored layout with the running
// layout at the same schema version. A difference is an *Error with code
// CodeStoredLayoutMismatch whose details name the table and column.
func CheckStoredLayout(stored, running schema.Layout) error {
	m, differ := schema.StoredLayoutMismatch(stored, running)
	if !differ {
		return nil
	}
	details := map[string]any{"table": m.Table}
	if m.Column != "" {
		details["column"] = m.Column
	}
	return &Error{Code: CodeStoredLayoutMismatch, Message: "stored layout differs from the running schema", Details: details}
}
