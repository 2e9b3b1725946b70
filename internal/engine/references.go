package engine

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// refDetails is the PUSH_RESULT_DETAILS object of a reference violation,
// in the canonical member order a replay emits too (store decodes
// recorded details into it).
type refDetails = wire.RejectionDetails

func referenceViolation(i int, d refDetails) *rejection {
	rej := opError(i, syncerr.CodeReferenceViolation, "a declared reference is violated")
	b, err := json.Marshal(d)
	if err == nil && wire.ValidateRejectionDetails(string(b)) != nil {
		// A reference value that is not a safe recovery token is dropped;
		// the reason alone still tells the client what happened.
		d.References = nil
		b, err = json.Marshal(d)
	}
	if err == nil {
		rej.details = &wire.DetailEntry{OpIndex: int32(i), DetailsJSON: string(b)}
	}
	return rej
}

// enforceReferences runs once per commit after every client operation is
// staged (§6.11): deletes first (RESTRICT refuses, CASCADE and SET NULL
// append operations, recursively), then the staged upserts' parents.
func (a *applier) enforceReferences(ctx context.Context) (*rejection, error) {
	appended, cascadeLimit := 0, a.r.e.cfg.Limits.MaxCascadeOperations
	// What is staged from here on is appended, not the client's: the row
	// validators and the whole-commit evidence say so.
	a.appending = true
	for k := 0; k < len(a.staged); k++ {
		st := a.staged[k]
		if st.op != wire.OpDelete || len(st.table.ReferencedBy()) == 0 {
			continue
		}
		pk := st.values[st.table.PrimaryKey()]
		for _, ref := range st.table.ReferencedBy() {
			child, _ := a.r.e.cfg.Schema.Table(ref.Table)
			children, err := a.tx.RowsByColumn(ctx, ref.Table, ref.Column, pk, cascadeLimit+1)
			if err != nil {
				return nil, err
			}
			if len(children) == 0 {
				continue
			}
			switch ref.OnDelete {
			case schema.OnDeleteCascade, schema.OnDeleteSetNull:
			default:
				return referenceViolation(st.opIndex, refDetails{Reason: "restricted_delete",
					References: map[string]string{"child": ref.Table}}), nil
			}
			appended += len(children)
			if appended > cascadeLimit {
				return referenceViolation(st.opIndex, refDetails{Reason: "cascade_limit"}), nil
			}
			for _, row := range children {
				var rej *rejection
				if ref.OnDelete == schema.OnDeleteCascade {
					rej, err = a.delete(ctx, st.opIndex, child, row)
				} else {
					rej, err = a.setNull(ctx, st.opIndex, child, row, ref.ColumnIndex)
				}
				if rej != nil || err != nil {
					return rej, err
				}
			}
		}
	}
	for _, st := range a.staged {
		if st.op != wire.OpUpsert || st.present == nil {
			continue
		}
		for _, ref := range st.table.References() {
			v := st.values[ref.ColumnIndex]
			if !st.present[ref.ColumnIndex] || v.Null {
				continue
			}
			parent, _ := a.r.e.cfg.Schema.Table(ref.ParentTable)
			id, ok := schema.RenderValue(parent.Columns()[parent.PrimaryKey()].Type, v)
			if !ok {
				continue
			}
			if _, err := a.tx.Row(ctx, ref.ParentTable, id); errors.Is(err, store.ErrNotFound) {
				return referenceViolation(st.opIndex, refDetails{Reason: "missing_parent",
					FieldPaths: []string{ref.Column}, References: map[string]string{"parent": ref.ParentTable, "row": id}}), nil
			} else if err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// setNull appends the sparse upsert that clears a child's reference
// column, last-writer-wins (only that column's version moves).
func (a *applier) setNull(ctx context.Context, i int, t *schema.CompiledTable, stored store.Row, col int) (*rejection, error) {
	n := len(t.Columns())
	in := wire.SparseRow{Present: make([]bool, n), Values: make([]wire.Value, n)}
	in.Present[col] = true
	in.Values[col] = wire.Value{Null: true}
	op := &wire.Operation{Table: t.Name(), RowID: stored.RowID, Op: wire.OpUpsert}
	rej, err := a.update(ctx, i, t, op, stored, in)
	if rej == nil && err == nil {
		// An appended upsert is not a client write: its parent is not
		// checked (it names none).
		a.staged[len(a.staged)-1].present = nil
	}
	return rej, err
}
