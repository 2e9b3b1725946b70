package engine

import (
	"bytes"
	"context"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// update applies an upsert to an existing row (§6.2; wire versions 1 and 2
// keep their row-level version check and silently keep scope columns).
func (a *applier) update(ctx context.Context, i int, t *schema.CompiledTable, op *wire.Operation, stored store.Row, in wire.SparseRow) (*rejection, error) {
	storedVals, rej, err := a.storedState(i, t, stored)
	if rej != nil || err != nil {
		return rej, err
	}
	v3 := a.r.req.Version >= wire.Version3
	cols := t.Columns()
	for _, sc := range t.Scopes() {
		ci := sc.ColumnIndex
		if !in.Present[ci] || sameValue(cols[ci].Type, in.Values[ci], storedVals[ci]) {
			continue
		}
		if v3 {
			return opError(i, syncerr.CodeInvalidRequest, "scope columns cannot change on update"), nil
		}
		in.Values[ci] = storedVals[ci]
	}
	versions := columnVersions(stored.ColumnVersions, len(cols), stored.ServerVersion)
	if base := op.BaseVersion; base != nil {
		switch {
		case !v3:
			if *base != stored.ServerVersion {
				return a.conflict(i, t, stored, nil)
			}
		case *base > stored.ServerVersion:
			return opError(i, syncerr.CodeInvalidRequest, "baseVersion is ahead of the server"), nil
		case *base == 0:
			return a.conflict(i, t, stored, a.presentColumns(t, in, func(int) bool { return true }))
		default:
			if contended := a.presentColumns(t, in, func(c int) bool { return versions[c] > *base }); len(contended) > 0 {
				return a.conflict(i, t, stored, contended)
			}
		}
	}
	next := stored.ServerVersion + 1
	vals := make([]wire.Value, len(cols))
	copy(vals, storedVals)
	for c := range cols {
		if in.Present[c] {
			vals[c] = in.Values[c]
			if c != t.PrimaryKey() {
				versions[c] = next
			}
		}
	}
	if rej, err := a.blobsExist(ctx, i, t, vals, storedVals); rej != nil || err != nil {
		return rej, err
	}
	if rej := a.mergeCRDT(i, t, vals, in.Present, storedVals); rej != nil {
		return rej, nil
	}
	payload, err := t.RowCodec().AppendRow(nil, vals)
	if err != nil {
		return opError(i, syncerr.CodeInvalidRequest, "the merged row does not encode"), nil
	}
	if rej, err := a.validateOp(ctx, i, t, wire.OpUpsert, stored.RowID, vals, storedVals, stored.ServerVersion, next); rej != nil || err != nil {
		return rej, err
	}
	row := store.Row{Table: t.Name(), RowID: stored.RowID, ServerVersion: next, Scopes: stored.Scopes,
		Payload: payload, ColumnVersions: encodeColumnVersions(versions, t.PrimaryKey())}
	return a.upsertRow(ctx, i, t, row, vals, in.Present)
}

// presentColumns lists the present non-crdt, non-primary-key columns that
// pass keep.
func (a *applier) presentColumns(t *schema.CompiledTable, in wire.SparseRow, keep func(int) bool) []int {
	out := []int{}
	crdt := t.CRDTColumns()
	for c := range in.Present {
		if !in.Present[c] || c == t.PrimaryKey() || contains(crdt, c) || !keep(c) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// conflict is the version-conflict result record (§6.3), with the
// contended columns as a presence-layout bitmap.
// An older client gets the row and the bitmap in its own layout.
func (a *applier) conflict(i int, t *schema.CompiledTable, stored store.Row, contended []int) (*rejection, error) {
	client, _, _ := a.r.tables(t.Name())
	row, err := narrowPayload(t, client, stored.Payload)
	if err != nil {
		return nil, err
	}
	n := len(client.Columns())
	bitmap := make([]byte, (n+7)/8)
	for _, c := range contended {
		if c < n {
			bitmap[c/8] |= 1 << (c % 8)
		}
	}
	return &rejection{result: wire.OpResult{OpIndex: int32(i), Status: wire.OpConflict,
		Code: syncerr.CodeVersionConflict, Message: "the row changed since baseVersion",
		ServerVersion: stored.ServerVersion, ServerRow: row, ConflictColumns: bitmap}}, nil
}

// insert applies an upsert to an absent row (§6.2 table).
func (a *applier) insert(ctx context.Context, i int, t *schema.CompiledTable, op *wire.Operation, in wire.SparseRow) (*rejection, error) {
	v3 := a.r.req.Version >= wire.Version3
	client, _, _ := a.r.tables(t.Name())
	full := true
	for c, p := range in.Present {
		if c >= len(client.Columns()) {
			// Appended since the client's version: NULL on insert.
			in.Present[c], in.Values[c] = true, wire.Value{Null: true}
			continue
		}
		full = full && p
	}
	base := op.BaseVersion
	tombstoned := false
	if v3 && base == nil {
		_, ok, err := a.tx.Tombstone(ctx, t.Name(), op.RowID)
		if err != nil {
			return nil, err
		}
		tombstoned = ok
	}
	if tombstoned {
		// Without a baseVersion a tombstone rejects the upsert. Authorize
		// the scope columns the payload names first, so that an actor
		// learns of the deletion only for a row it may write; a patch
		// that names none (a stale edit, §6.2) is answered as deleted.
		if !presentScopesAuthorized(t, in, a.r.allowed) {
			return opError(i, syncerr.CodeForbidden, "the actor may not write this row"), nil
		}
		return opError(i, syncerr.CodeRowDeleted, "the row was deleted"), nil
	}
	if base != nil && *base != 0 {
		// Any baseVersion but 0 names an update (a negative one too, §10's
		// sync.row_missing): nothing to update here.
		// Authorize the payload before saying the row is absent, partial
		// or not, so that absence is disclosed only to actors with the
		// scope; an absent scope column is a missing value: denied.
		vals := in.Values
		if !full {
			vals = make([]wire.Value, len(in.Values))
			for c, p := range in.Present {
				if vals[c] = in.Values[c]; !p {
					vals[c] = wire.Value{Null: true}
				}
			}
		}
		if ss, err := t.StoredScopes(vals); err != nil || !authorized(ss, a.r.allowed) {
			return opError(i, syncerr.CodeForbidden, "the actor may not write this row"), nil
		}
		return opError(i, syncerr.CodeRowMissing, "the row does not exist"), nil
	}
	if !full {
		return opError(i, syncerr.CodeRowMissing, "a partial row cannot create a row"), nil
	}
	ss, err := t.StoredScopes(in.Values)
	if err != nil || !authorized(ss, a.r.allowed) {
		return opError(i, syncerr.CodeForbidden, "the actor may not write this row"), nil
	}
	if rej, err := a.blobsExist(ctx, i, t, in.Values, nil); rej != nil || err != nil {
		return rej, err
	}
	if rej := a.mergeCRDT(i, t, in.Values, in.Present, nil); rej != nil {
		return rej, nil
	}
	payload, err := t.RowCodec().AppendRow(nil, in.Values)
	if err != nil {
		return opError(i, syncerr.CodeInvalidRequest, "the row does not encode"), nil
	}
	if rej, err := a.validateOp(ctx, i, t, wire.OpUpsert, op.RowID, in.Values, nil, 0, 1); rej != nil || err != nil {
		return rej, err
	}
	if !v3 || base != nil {
		// A v3 unversioned insert got here only without a tombstone.
		if err := a.tx.ClearTombstone(ctx, t.Name(), op.RowID); err != nil {
			return nil, err
		}
	}
	row := store.Row{Table: t.Name(), RowID: op.RowID, ServerVersion: 1, Scopes: wireScopes(ss), Payload: payload}
	return a.upsertRow(ctx, i, t, row, in.Values, in.Present)
}

// presentScopesAuthorized reports whether every scope column present in
// the payload holds a value the actor may write (a NULL one may not).
func presentScopesAuthorized(t *schema.CompiledTable, in wire.SparseRow, allowed map[string][]string) bool {
	cols := t.Columns()
	for _, sc := range t.Scopes() {
		if sc.ColumnIndex >= len(in.Present) || !in.Present[sc.ColumnIndex] {
			continue
		}
		v, ok := schema.RenderValue(cols[sc.ColumnIndex].Type, in.Values[sc.ColumnIndex])
		if !ok || !authorized(schema.StoredScopes{{Variable: sc.Pattern.Variable, Value: v}}, allowed) {
			return false
		}
	}
	return true
}

func sameValue(t wire.ColumnType, a, b wire.Value) bool {
	if a.Null || b.Null {
		return a.Null == b.Null
	}
	switch t {
	case wire.TypeInteger:
		return a.Int == b.Int
	case wire.TypeBoolean:
		return a.Bool == b.Bool
	case wire.TypeFloat:
		return a.Float == b.Float
	case wire.TypeBytes, wire.TypeCRDT:
		return bytes.Equal(a.Bytes, b.Bytes)
	}
	return a.Str == b.Str
}
