package engine

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// applier applies the operations of one commit inside its candidate
// savepoint.
type applier struct {
	r       *request
	tx      store.WriteTx
	changes []store.Change
	results []wire.OpResult
	staged  []stagedOp
	// commitID is the commit's clientCommitId; appending is set while
	// declared references append operations; evidence lists the
	// operations for the whole-commit validator (hooks.go).
	commitID  string
	appending bool
	evidence  []validate.Operation
	// blobsPresent caches the blobs found stored during this commit.
	blobsPresent map[string]bool
}

// stagedOp is an applied operation, kept for reference enforcement.
type stagedOp struct {
	opIndex int
	table   *schema.CompiledTable
	rowID   string
	op      wire.Op
	values  []wire.Value // the row after an upsert, before a delete
	present []bool       // the columns an upsert wrote
}

// rejection is the terminating result record of a rejected commit.
type rejection struct {
	result  wire.OpResult
	details *wire.DetailEntry
}

func opError(i int, code, message string) *rejection {
	ent, _ := syncerr.Lookup(code)
	return &rejection{result: wire.OpResult{OpIndex: int32(i), Status: wire.OpError,
		Code: code, Message: message, Retryable: ent.Retryable}}
}

// apply runs every operation; the first rejection ends the commit.
func (a *applier) apply(ctx context.Context, ops []wire.Operation) (*rejection, error) {
	a.results = make([]wire.OpResult, 0, len(ops))
	for i := range ops {
		rej, err := a.applyOne(ctx, i, &ops[i])
		if err != nil || rej != nil {
			return rej, err
		}
		a.results = append(a.results, wire.OpResult{OpIndex: int32(i), Status: wire.OpApplied})
	}
	if rej, err := a.enforceReferences(ctx); rej != nil || err != nil {
		return rej, err
	}
	return a.validateCommit(ctx, len(ops))
}

func (a *applier) applyOne(ctx context.Context, i int, op *wire.Operation) (*rejection, error) {
	client, t, ok := a.r.tables(op.Table)
	if !ok {
		return opError(i, syncerr.CodeUnknownTable, "the operation names a table the server does not serve"), nil
	}
	if !a.r.resolveOK {
		return opError(i, syncerr.CodeForbidden, "scopes could not be resolved"), nil
	}
	if p := textProblem(op.RowID, MaxIdentifierBytes); p != "" {
		return opError(i, syncerr.CodeInvalidRequest, "rowId "+p), nil
	}
	stored, err := a.tx.Row(ctx, op.Table, op.RowID)
	exists := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if op.Op == wire.OpDelete {
		if !exists {
			a.noteAbsentDelete(i, op.Table, op.RowID)
			return nil, nil
		}
		return a.delete(ctx, i, t, stored)
	}
	codec := client.RowCodec()
	var in wire.SparseRow
	if a.r.req.Version >= wire.Version3 {
		in, err = codec.DecodeSparse(op.Payload)
	} else {
		var vals []wire.Value
		if vals, err = codec.DecodeRow(op.Payload); err == nil {
			in = fullSparse(vals)
		}
	}
	if err != nil {
		return opError(i, syncerr.CodeInvalidRequest, "the payload does not decode for this table"), nil
	}
	in = widen(in, len(t.Columns()))
	if p := valueProblem(t, in); p != "" {
		return opError(i, syncerr.CodeInvalidRequest, "the payload cannot be stored: "+p), nil
	}
	if id, ok := schema.RenderValue(t.Columns()[t.PrimaryKey()].Type, in.Values[t.PrimaryKey()]); !ok || id != op.RowID {
		return opError(i, syncerr.CodeInvalidRequest, "the payload's primary key differs from rowId"), nil
	}
	if exists {
		return a.update(ctx, i, t, op, stored, in)
	}
	return a.insert(ctx, i, t, op, in)
}

// widen extends an older client's row to the current layout: the columns
// appended since are absent.
func widen(in wire.SparseRow, n int) wire.SparseRow {
	for len(in.Present) < n {
		in.Present = append(in.Present, false)
		in.Values = append(in.Values, wire.Value{Null: true})
	}
	return in
}

func fullSparse(vals []wire.Value) wire.SparseRow {
	present := make([]bool, len(vals))
	for i := range present {
		present[i] = true
	}
	return wire.SparseRow{Present: present, Values: vals}
}

// storedState decodes a stored row and checks its scopes and authorization
// (§3.4 step 2 with the stored row).
func (a *applier) storedState(i int, t *schema.CompiledTable, stored store.Row) ([]wire.Value, *rejection, error) {
	vals, err := t.RowCodec().DecodeRow(stored.Payload)
	if err != nil {
		return nil, nil, storedRowError(t.Name(), stored.RowID, err)
	}
	ss, err := t.StoredScopes(vals)
	if err != nil {
		return nil, opError(i, syncerr.CodeMissingScopes, "the stored row lacks a scope value"), nil
	}
	if !authorized(ss, a.r.allowed) {
		return nil, opError(i, syncerr.CodeForbidden, "the actor may not write this row"), nil
	}
	return vals, nil, nil
}

func (a *applier) delete(ctx context.Context, i int, t *schema.CompiledTable, stored store.Row) (*rejection, error) {
	vals, rej, err := a.storedState(i, t, stored)
	if rej != nil || err != nil {
		return rej, err
	}
	if rej, err := a.validateOp(ctx, i, t, wire.OpDelete, stored.RowID, nil, vals, stored.ServerVersion, 0); rej != nil || err != nil {
		return rej, err
	}
	return nil, a.deleteRow(ctx, i, t, stored, vals)
}

// deleteRow removes a row and stages its delete change.
func (a *applier) deleteRow(ctx context.Context, i int, t *schema.CompiledTable, stored store.Row, vals []wire.Value) error {
	if err := a.tx.DeleteRow(ctx, t.Name(), stored.RowID); err != nil {
		return err
	}
	if err := a.blobRefs(ctx, t, stored.RowID, nil); err != nil {
		return err
	}
	a.changes = append(a.changes, store.Change{Table: t.Name(), RowID: stored.RowID, Op: wire.OpDelete, Scopes: stored.Scopes})
	a.staged = append(a.staged, stagedOp{opIndex: i, table: t, rowID: stored.RowID, op: wire.OpDelete, values: vals})
	return nil
}

// authorized reports whether a row's scope values are all allowed (§3.4
// step 3): every declared variable's value is in the allowed list, or the
// list holds "*".
func authorized(ss schema.StoredScopes, allowed map[string][]string) bool {
	for _, sv := range ss {
		ok := false
		for _, v := range allowed[sv.Variable] {
			if v == "*" || v == sv.Value {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// wireScopes turns stored scopes into canonical key order.
func wireScopes(ss schema.StoredScopes) wire.StoredScopes {
	m := make(map[string]string, len(ss))
	for _, sv := range ss {
		m[sv.Variable] = sv.Value
	}
	return store.ScopesFromMap(m)
}

func (a *applier) upsertRow(ctx context.Context, i int, t *schema.CompiledTable, row store.Row, vals []wire.Value, present []bool) (*rejection, error) {
	if err := a.blobRefs(ctx, t, row.RowID, vals); err != nil {
		return nil, err
	}
	err := a.tx.UpsertRow(ctx, store.RowWrite{Row: row, Values: vals})
	var ce *store.ConstraintError
	if errors.As(err, &ce) {
		return opError(i, syncerr.CodeConstraintViolation, "the write violates a unique constraint"), nil
	}
	if err != nil {
		return nil, err
	}
	a.changes = append(a.changes, store.Change{Table: t.Name(), RowID: row.RowID, Op: wire.OpUpsert,
		RowVersion: row.ServerVersion, Scopes: row.Scopes, Payload: row.Payload})
	a.staged = append(a.staged, stagedOp{opIndex: i, table: t, rowID: row.RowID, op: wire.OpUpsert, values: vals, present: present})
	return nil, nil
}
