package syncgo

import (
	"fmt"

	"github.com/syncgo/syncgo/crdt/yjs"
	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/schema"
)

// CRDTMerger merges the value of a crdt column (spec §5.10.2). On a push
// that writes the column, the server stores Merge(stored, incoming)
// instead of the pushed bytes: stored is the column's current value (nil
// when the row is new or the column is NULL), incoming the pushed value
// (never nil: a pushed NULL clears the column without a merge).
//
// Merge must be commutative, associative and idempotent over the values
// it consumes, so that concurrent pushes converge whatever their order
// and a replayed push changes nothing. It runs inside the push
// transaction, may be called concurrently, and must not keep or modify
// its arguments. An error (or a panic) rejects the operation, and so its
// commit, with sync.crdt_merge_failed; so does a result larger than
// Limits.MaxCRDTBytes.
type CRDTMerger interface {
	Merge(stored, incoming []byte) ([]byte, error)
}

// CRDTMergerFunc adapts a function to CRDTMerger.
type CRDTMergerFunc func(stored, incoming []byte) ([]byte, error)

// Merge calls f.
func (f CRDTMergerFunc) Merge(stored, incoming []byte) ([]byte, error) { return f(stored, incoming) }

// DefaultMaxCRDTBytes is the default of Limits.MaxCRDTBytes.
const DefaultMaxCRDTBytes = engine.DefaultMaxCRDTBytes

// crdtMergers is the registry of cfg: the host's entries over the
// built-in yjs-doc merger (package crdt/yjs, bounded by
// Limits.MaxCRDTBytes); a nil entry removes a type.
func crdtMergers(cfg Config) map[string]engine.CRDTMerger {
	limit := cfg.Limits.MaxCRDTBytes
	if limit <= 0 {
		limit = DefaultMaxCRDTBytes
	}
	out := map[string]engine.CRDTMerger{schema.CRDTYjsDoc: yjs.Merger{MaxBytes: limit}}
	for name, m := range cfg.CRDTMergers {
		if m == nil {
			delete(out, name)
			continue
		}
		out[name] = m
	}
	return out
}

// checkCRDTTypes refuses a schema whose crdt column names a crdtType
// without a merger (§5.10.1: a server bug, caught before serving).
func checkCRDTTypes(mergers map[string]engine.CRDTMerger, schemas ...*schema.Compiled) error {
	for _, sc := range schemas {
		for _, t := range sc.Tables() {
			for _, c := range t.CRDTColumns() {
				col := t.Columns()[c]
				if _, ok := mergers[col.CRDTType]; !ok {
					return fmt.Errorf("table %q column %q: no CRDT merger is registered for crdtType %q (Config.CRDTMergers)",
						t.Name(), col.Name, col.CRDTType)
				}
			}
		}
	}
	return nil
}

// CheckCRDTMergers reports, as New would, a crdt column of the schemas
// whose crdtType has no merger: neither built in nor in mergers (the
// Config.CRDTMergers a host would pass). Tools that check a configuration
// without starting a server use it.
func CheckCRDTMergers(mergers map[string]CRDTMerger, schemas ...*schema.Compiled) error {
	return checkCRDTTypes(crdtMergers(Config{CRDTMergers: mergers}), schemas...)
}
