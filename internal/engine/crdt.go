package engine

import (
	"fmt"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// mergeCRDT replaces each present, non-NULL crdt value of vals with the
// merge of the stored value and the pushed one (§5.10.3 rule 2); stored
// is nil for an insert. A NULL clears the column, as for any type; an
// absent column is unchanged. A missing merger, a failed merge or a
// result over Limits.MaxCRDTBytes rejects the operation with
// sync.crdt_merge_failed, and so the commit.
func (a *applier) mergeCRDT(i int, t *schema.CompiledTable, vals []wire.Value, present []bool, stored []wire.Value) *rejection {
	cols := t.Columns()
	for _, c := range t.CRDTColumns() {
		if !present[c] || vals[c].Null {
			continue
		}
		col := cols[c]
		m := a.r.e.cfg.CRDTMergers[col.CRDTType]
		if m == nil {
			return opError(i, syncerr.CodeCRDTMergeFailed, "no CRDT merger registered")
		}
		var prev []byte
		if stored != nil && !stored[c].Null {
			prev = stored[c].Bytes
		}
		merged, err := a.r.e.runMerger(m, prev, vals[c].Bytes)
		if err != nil {
			a.r.e.cfg.Logger.Info("crdt merge failed", "table", t.Name(), "column", col.Name,
				"crdtType", col.CRDTType, "err", err)
			return opError(i, syncerr.CodeCRDTMergeFailed, "CRDT merger failed: "+err.Error())
		}
		vals[c] = wire.Value{Bytes: merged}
	}
	return nil
}

// runMerger calls a merger within the crdt size bound; a panic is a
// failed merge.
func (e *Engine) runMerger(m CRDTMerger, stored, incoming []byte) (merged []byte, err error) {
	limit := e.cfg.Limits.MaxCRDTBytes
	if len(incoming) > limit {
		return nil, fmt.Errorf("the pushed value is %d bytes, over the %d-byte bound", len(incoming), limit)
	}
	defer func() {
		if p := recover(); p != nil {
			merged, err = nil, fmt.Errorf("the merger panicked: %v", p)
		}
	}()
	merged, err = m.Merge(stored, incoming)
	if err == nil && len(merged) > limit {
		err = fmt.Errorf("the merged value is %d bytes, over the %d-byte bound", len(merged), limit)
	}
	return merged, err
}
