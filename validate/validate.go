// Package validate holds the server-side write rules a host registers with
// syncgo.Config: per-table write validators (§6.7 of the protocol) and one
// whole-commit validator (§6.8). Both are Go callbacks that run inside the
// push transaction, under the partition's write boundary, and may read the
// transaction's candidate state through authoritative queries (Reader): a
// rule sees exactly the state the commit will be applied to, and two
// concurrent commits can never both pass a rule against states that exclude
// one another.
//
// A validator accepts by returning nil and rejects by returning a
// *Rejection built with Reject: the whole commit rolls back (§6.4), and its
// PUSH_RESULT is rejected with the rejection's code, message and details
// (PUSH_RESULT_DETAILS, §6.3.1), recorded with the commit's idempotency
// outcome so a replay answers the same. Any other error (or a panic) also
// rejects the commit, with sync.constraint_violation and a static message:
// the error itself goes to the server's log, never onto the wire. A
// validator that fails because the storage failed (a query that could not
// run) fails the request instead, with nothing recorded, so the client
// retries.
//
//	cfg.Validators = map[string]validate.Validator{
//		"tasks": func(ctx context.Context, w *validate.Write) error {
//			if w.Op != validate.Upsert || w.Stored != nil {
//				return nil // only new tasks count
//			}
//			n, err := w.Tx.Count(ctx, store.Query{Table: "tasks", Limit: 50,
//				Where: []store.Filter{store.Eq("list_id", w.Row["list_id"]), store.Eq("done", false)}})
//			if err != nil {
//				return err
//			}
//			if n >= 50 { // the count includes this row: it is staged
//				return validate.Reject("app.list_full", "a list holds at most 50 open tasks",
//					&validate.Details{FieldPaths: []string{"list_id"}, Reason: "list_full"})
//			}
//			return nil
//		},
//	}
package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The operations a validator sees.
const (
	Upsert = wire.OpUpsert
	Delete = wire.OpDelete
)

// Row is a row keyed by column name. Values have the Go type of their
// column: string for string, json (the JSON text) and blob_ref (the
// canonical BlobRef JSON); int64 for integer; float64 for float; bool for
// boolean; []byte for bytes and crdt (the merged state); nil for NULL.
// Callers must not modify a Row they are handed.
type Row map[string]any

// Operation is one operation of a commit as it will be (or was) staged.
type Operation struct {
	// OpIndex is the index of the client operation in the commit; an
	// operation a declared reference appended (§6.11: a cascade's delete,
	// a SET NULL's upsert) carries the index of the client delete it came
	// from.
	OpIndex int
	// Op is Upsert or Delete.
	Op    wire.Op
	Table string
	RowID string
	// Row is the row that will persist: for an upsert, the merged full row
	// (the present columns over the stored ones); nil for a delete.
	Row Row
	// Stored is the row before the operation; nil when there was none (an
	// insert, or a delete of an absent row).
	Stored Row
	// StoredServerVersion is the stored row's server version (0 without
	// one); NextServerVersion the version the upsert writes (0 for a
	// delete).
	StoredServerVersion int64
	NextServerVersion   int64
	// Appended reports an operation a declared reference appended.
	Appended bool
}

// Origin is the ambient identity of a commit: who pushed it, where, and
// its idempotency key.
type Origin struct {
	ActorID        string
	Partition      string
	ClientID       string
	ClientCommitID string
}

// Write is what a row validator (§6.7) sees: one operation, after decode
// and scope authorization, immediately before it is written. A delete of
// an absent row is a no-op and runs no validator.
type Write struct {
	Operation
	Origin
	// Tx reads the candidate state of the push transaction: every
	// operation staged before this one is visible, this one is not yet.
	Tx Reader
}

// Commit is what the whole-commit validator (§6.8) sees: every operation
// of the commit once all of them are staged and declared references are
// enforced, before the commit is appended.
type Commit struct {
	Origin
	// Operations are the client operations in commit order, deletes of
	// absent rows included, then the operations declared references
	// appended.
	Operations []Operation
	// Tx reads the final candidate state.
	Tx Reader
}

// Validator checks one operation on a table (§6.7).
type Validator func(ctx context.Context, w *Write) error

// CommitValidator checks a whole commit (§6.8).
type CommitValidator func(ctx context.Context, c *Commit) error

// StoredRow is a row read from the candidate state.
type StoredRow struct {
	RowID         string
	ServerVersion int64
	Values        Row
}

// Reader reads the candidate state of a push transaction on the
// transaction's own connection, in the commit's partition only. Queries
// name tables and columns of the compiled schema (tables whose typed
// columns are stored, the default); see store.Query. Its methods must be
// called only from the validator they were handed to, before it returns.
type Reader interface {
	// Row reads one row by id; ok is false when it is absent.
	Row(ctx context.Context, table, rowID string) (row StoredRow, ok bool, err error)
	// Rows returns the rows a query selects, in its order.
	Rows(ctx context.Context, q store.Query) ([]StoredRow, error)
	// Count counts the rows a query selects (at most q.Limit when set).
	Count(ctx context.Context, q store.Query) (int64, error)
	// Exists reports whether a query selects a row.
	Exists(ctx context.Context, q store.Query) (bool, error)
	// SumInt sums an integer column over the rows a query selects;
	// SumFloat a float column.
	SumInt(ctx context.Context, q store.Query, column string) (int64, error)
	SumFloat(ctx context.Context, q store.Query, column string) (float64, error)
}

// Details is the bounded recovery metadata a rejection may carry (§6.3.1):
// field paths, a reason and a required action (stable tokens), and
// references the host approves for the actor. Never prose, row contents or
// authorization data.
type Details = wire.RejectionDetails

// reservedPrefixes are the protocol's code families (§6.7): a host code
// never starts with one.
var reservedPrefixes = []string{"sync.", "blob.", "operation.", "presence.", "client."}

// MaxCodeBytes and MaxMessageBytes bound a rejection's code and message.
const (
	MaxCodeBytes    = 128
	MaxMessageBytes = 1024
)

// Rejection is a deliberate rejection by a validator. Build it with
// Reject; return it (possibly wrapped) from the validator.
type Rejection struct {
	code    string
	message string
	details string // normalized JSON, "" without details
	opIndex int
	named   bool // AtOp named opIndex
}

// Reject builds a rejection with a host code, a message and optional
// details. A code that is empty, longer than MaxCodeBytes, not printable
// UTF-8, or in a protocol family (sync., blob., operation., presence.,
// client.), a message over MaxMessageBytes or not UTF-8, and details
// outside the §6.3.1 bounds are programming errors of the host: Reject
// panics, at the point the rejection is built. (A validator that panics
// rejects the commit with sync.constraint_violation and logs the panic.)
func Reject(code, message string, details *Details) *Rejection {
	if err := checkCode(code); err != nil {
		panic("validate.Reject: " + err.Error())
	}
	if len(message) > MaxMessageBytes || !utf8.ValidString(message) {
		panic(fmt.Sprintf("validate.Reject: the message must be UTF-8 of at most %d bytes", MaxMessageBytes))
	}
	r := &Rejection{code: code, message: message}
	if details != nil {
		b, err := json.Marshal(details)
		if err == nil {
			err = wire.ValidateRejectionDetails(string(b))
		}
		if err != nil {
			panic("validate.Reject: invalid details: " + err.Error())
		}
		r.details = string(b)
	}
	return r
}

// CheckCode reports whether code may be a host rejection code.
func CheckCode(code string) error { return checkCode(code) }

func checkCode(code string) error {
	if code == "" || len(code) > MaxCodeBytes || !utf8.ValidString(code) {
		return fmt.Errorf("a host code is 1-%d bytes of UTF-8", MaxCodeBytes)
	}
	for _, r := range code {
		if r <= 0x20 || r == 0x7f {
			return errors.New("a host code holds no spaces or control characters")
		}
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(code, p) {
			return fmt.Errorf("host code %q uses the reserved protocol prefix %q", code, p)
		}
	}
	return nil
}

// AtOp returns a copy of r attributed to the commit's operation opIndex:
// how a whole-commit validator names the operation a failure is about. A
// row validator's rejection is always attributed to its operation.
func (r *Rejection) AtOp(opIndex int) *Rejection {
	c := *r
	c.opIndex, c.named = opIndex, true
	return &c
}

// Code returns the host code.
func (r *Rejection) Code() string { return r.code }

// Message returns the message.
func (r *Rejection) Message() string { return r.message }

// DetailsJSON returns the normalized details object, or "".
func (r *Rejection) DetailsJSON() string { return r.details }

// OpIndex returns the operation AtOp named, and whether it named one.
func (r *Rejection) OpIndex() (int, bool) { return r.opIndex, r.named }

// Error implements error.
func (r *Rejection) Error() string { return "rejected: " + r.code + ": " + r.message }
