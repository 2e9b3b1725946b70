package engine

import (
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
)

// The served schema window (§9): the current schema and, optionally, older
// versions whose clients are still served, each with its own row codec.
// Storage, fences, authorization and validators use the current schema;
// an older client's rows are projected into its layout on the way out and
// widened to the current layout on the way in. Older versions must be
// append-only prefixes of the current one.

// ValidateWindow checks that every older schema is served by the current
// one: versions strictly decreasing, every older table present with the
// same primary key, scopes and declared references, its columns a prefix
// of the current table's, and the current table's appended columns
// nullable.
func ValidateWindow(current *schema.Compiled, older []*schema.Compiled) error {
	prev := current.Version()
	for _, o := range older {
		if o.Version() >= prev {
			return fmt.Errorf("schema window: version %d must be below %d", o.Version(), prev)
		}
		prev = o.Version()
		for _, ot := range o.Tables() {
			ct, ok := current.Table(ot.Name())
			if !ok {
				return fmt.Errorf("schema window: table %q of version %d is not in the current schema", ot.Name(), o.Version())
			}
			oc, cc := ot.WireColumns(), ct.WireColumns()
			if len(oc) > len(cc) || !slices.Equal(oc, cc[:len(oc)]) {
				return fmt.Errorf("schema window: table %q of version %d is not a prefix of the current table", ot.Name(), o.Version())
			}
			// The wire view does not show what only the schema says of a
			// column (§9: existing columns remain identical): end-to-end
			// encryption and its declared type, the crdt merger.
			for i, c := range ot.Columns() {
				if now := ct.Columns()[i]; c != now {
					return fmt.Errorf("schema window: column %q of %q changed after version %d (encrypted %t -> %t, declaredType %q -> %q, crdtType %q -> %q); existing columns must stay identical (§9)",
						c.Name, ot.Name(), o.Version(), c.Encrypted, now.Encrypted, c.DeclaredType, now.DeclaredType, c.CRDTType, now.CRDTType)
				}
			}
			for _, c := range cc[len(oc):] {
				if !c.Nullable {
					return fmt.Errorf("schema window: column %q appended to %q after version %d must be nullable", c.Name, ot.Name(), o.Version())
				}
			}
			if ot.PrimaryKey() != ct.PrimaryKey() || !slices.Equal(scopeSig(ot), scopeSig(ct)) {
				return fmt.Errorf("schema window: table %q changed its primary key or scopes after version %d", ot.Name(), o.Version())
			}
			if !slices.Equal(refSig(ot), refSig(ct)) {
				return fmt.Errorf("schema window: table %q changed its declared references after version %d (§9: they must stay identical)", ot.Name(), o.Version())
			}
		}
	}
	return nil
}

func scopeSig(t *schema.CompiledTable) []string {
	var out []string
	for _, s := range t.Scopes() {
		out = append(out, s.Pattern.String()+"="+s.Column)
	}
	slices.Sort(out)
	return out
}

func refSig(t *schema.CompiledTable) []string {
	var out []string
	for _, r := range t.References() {
		out = append(out, r.Column+"->"+r.ParentTable+" "+r.OnDelete)
	}
	slices.Sort(out)
	return out
}

// schemaFor returns the served schema of a client version, or nil.
func (e *Engine) schemaFor(version int32) *schema.Compiled {
	if version == e.cfg.Schema.Version() {
		return e.cfg.Schema
	}
	for _, o := range e.cfg.Window {
		if o.Version() == version {
			return o
		}
	}
	return nil
}

// oldestServed is the floor of the window.
func (e *Engine) oldestServed() int32 {
	if n := len(e.cfg.Window); n > 0 {
		return e.cfg.Window[n-1].Version()
	}
	return e.cfg.Schema.Version()
}

// storedRowError is the error of a stored row that does not decode: the
// server's fault (a damaged database, or a bug), so sync.internal_error
// (§10.2), whose text goes to the host's error hook only. The decode
// error is kept as text, not wrapped: a wire.DecodeError in the chain
// would make asProtocolError answer the client's request as invalid.
func storedRowError(table, rowID string, err error) error {
	if rowID == "" {
		return syncerr.Internal(fmt.Errorf("a stored row of %s does not decode: %v", table, err))
	}
	return syncerr.Internal(fmt.Errorf("stored row %s/%s does not decode: %v", table, rowID, err))
}

// narrowPayload re-encodes a stored row (current layout) in an older
// table's layout: the appended columns are dropped.
func narrowPayload(current, old *schema.CompiledTable, payload []byte) ([]byte, error) {
	if current == old || len(old.Columns()) == len(current.Columns()) {
		return payload, nil
	}
	vals, err := current.RowCodec().DecodeRow(payload)
	if err != nil {
		return nil, storedRowError(current.Name(), "", err)
	}
	return old.RowCodec().AppendRow(nil, vals[:len(old.Columns())])
}

// NarrowPayload is narrowPayload for the realtime binding: it projects a
// stored row of table into the layout of a client schema version.
func (e *Engine) NarrowPayload(table string, version int32, payload []byte) ([]byte, error) {
	old := e.schemaFor(version)
	if old == nil {
		return nil, fmt.Errorf("schema version %d is not served", version)
	}
	ot, ok := old.Table(table)
	if !ok {
		return nil, fmt.Errorf("table %q is not in schema version %d", table, version)
	}
	ct, _ := e.cfg.Schema.Table(table)
	return narrowPayload(ct, ot, payload)
}

// ServesTable reports whether a client schema version has a table.
func (e *Engine) ServesTable(version int32, table string) bool {
	s := e.schemaFor(version)
	if s == nil {
		return false
	}
	_, ok := s.Table(table)
	return ok
}

// HasWindow reports whether older schema versions are served.
func (e *Engine) HasWindow() bool { return len(e.cfg.Window) > 0 }
