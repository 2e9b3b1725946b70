package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The memory store's migration barrier. Lock order: partitions (in id
// order) before the database mutex, as a Write takes them.

type cpKey struct{ partition, name string }

// physColumn is a column of an app table as a catalog reports it.
type physColumn struct {
	name    string
	typ     string
	notNull bool
	pk      int // 1-based position in the primary key, 0 outside it
}

var (
	_ store.Barrier   = (*memStore)(nil)
	_ store.BarrierTx = (*memTx)(nil)
	_ Reopener        = (*memStore)(nil)
	_ RawExecer       = (*memStore)(nil)
)

// memType is the column type SQLite would declare.
func memType(t wire.ColumnType) string {
	switch t {
	case wire.TypeInteger, wire.TypeBoolean:
		return "INTEGER"
	case wire.TypeFloat:
		return "REAL"
	case wire.TypeBytes, wire.TypeCRDT:
		return "BLOB"
	}
	return "TEXT"
}

// memMeta are the storage columns: the first two lead the table, the
// others follow the app columns.
var memMeta = []physColumn{
	{"_sync_partition", "TEXT", true, 1},
	{"_sync_row_id", "TEXT", true, 2},
	{"_sync_server_version", "INTEGER", true, 0},
	{"_sync_scopes", "TEXT", true, 0},
	{"_sync_payload", "BLOB", true, 0},
	{"_sync_column_versions", "BLOB", false, 0},
}

// physTable is the physical table EnsureSchema creates for t.
func physTable(t *schema.CompiledTable) []physColumn {
	out := slices.Clone(memMeta[:2])
	for _, c := range expectedColumns(t)[2:] {
		if !strings.HasPrefix(c, "_sync_") {
			col, _ := t.ColumnIndex(c)
			out = append(out, physColumn{name: c, typ: memType(t.Columns()[col].Type)})
		}
	}
	return append(out, memMeta[2:]...)
}

// expectedColumns are the columns a table must have physically.
func expectedColumns(t *schema.CompiledTable) []string {
	out := []string{memMeta[0].name, memMeta[1].name}
	if t.Materialize() {
		for _, c := range t.Columns() {
			out = append(out, c.Name)
		}
	}
	for _, m := range memMeta[2:] {
		out = append(out, m.name)
	}
	return out
}

func physRefusal(details map[string]any) error {
	return &store.Error{Code: store.CodePhysicalLayoutMismatch, Message: "the database table differs from the storage layout", Details: details}
}

// checkPhysical compares a table with the storage layout (§2.4
// "Same-version storage readiness").
func checkPhysical(t *schema.CompiledTable, cols []physColumn) error {
	if len(cols) == 0 {
		return physRefusal(map[string]any{"table": t.Name(), "reason": "missing_table"})
	}
	byName := map[string]physColumn{}
	for _, c := range cols {
		byName[c.name] = c
	}
	for _, name := range expectedColumns(t) {
		if _, ok := byName[name]; !ok {
			return physRefusal(map[string]any{"table": t.Name(), "column": name, "reason": "missing_column"})
		}
	}
	nullability := func(notNull bool) string {
		if notNull {
			return "not_null"
		}
		return "nullable"
	}
	for _, m := range memMeta {
		got := byName[m.name]
		if !strings.EqualFold(got.typ, m.typ) {
			return physRefusal(map[string]any{"table": t.Name(), "column": m.name, "reason": "type", "expected": m.typ, "actual": got.typ})
		}
		if got.notNull != m.notNull {
			return physRefusal(map[string]any{"table": t.Name(), "column": m.name, "reason": "nullability",
				"expected": nullability(m.notNull), "actual": nullability(got.notNull)})
		}
	}
	for _, c := range cols {
		want := 0
		switch c.name {
		case memMeta[0].name:
			want = 1
		case memMeta[1].name:
			want = 2
		}
		if c.pk != want {
			return physRefusal(map[string]any{"table": t.Name(), "column": c.name, "reason": "primary_key"})
		}
	}
	return nil
}

// lockParts write-locks every partition, in id order, and returns the
// partitions and their unlock.
func (s *memStore) lockParts() (map[string]*memPartition, func()) {
	s.mu.Lock()
	parts := maps.Clone(s.parts)
	s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(parts))
	for _, id := range ids {
		parts[id].mu.Lock()
	}
	return parts, func() {
		for _, id := range ids {
			parts[id].mu.Unlock()
		}
	}
}

func (s *memStore) EnsureSchemaWith(_ context.Context, c *schema.Compiled, decls []store.CheckpointDeclaration) error {
	parts, unlock := s.lockParts() // a bump excludes writers
	defer unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if !s.is("barrier-unchecked") {
		for k, cp := range s.checkpoints {
			if cp.SchemaVersion != c.Version() || cp.State == store.CheckpointActivated {
				continue
			}
			if !slices.ContainsFunc(decls, func(d store.CheckpointDeclaration) bool { return d.Partition == k.partition && d.Name == k.name }) {
				return &store.Error{Code: store.CodeCheckpointIncomplete, Message: "a backfill checkpoint is incomplete",
					Details: map[string]any{"partition": k.partition, "name": k.name}}
			}
		}
	}
	var old schema.Layout
	if m := s.marker; m != nil {
		old = m.Layout
		switch {
		case m.SchemaVersion > c.Version() && !s.is("schema-newer-accepted"):
			return store.ErrSchemaNewer
		case m.SchemaVersion == c.Version():
			if mm, ok := schema.StoredLayoutMismatch(m.Layout, c.Layout()); ok && !s.is("layout-unchecked") {
				return &store.Error{Code: store.CodeStoredLayoutMismatch, Message: "stored layout differs from the running schema",
					Details: map[string]any{"table": mm.Table, "column": mm.Column}}
			}
			if !s.is("physical-unchecked") {
				for _, t := range c.Tables() {
					if err := checkPhysical(t, s.tables[t.Name()]); err != nil {
						return err
					}
				}
			}
			s.compiled = c
			return nil
		case m.SchemaVersion < c.Version():
			if err := schema.CheckAppendOnly(m.Layout, c.Layout()); err != nil {
				return &store.Error{Code: store.CodeSchemaMigrationPending, Message: "the stored layout cannot be migrated", Err: err}
			}
		}
	}
	// A bump, or the first EnsureSchema: the tables, the rewrite, the
	// marker, the declarations and the fences, all at once.
	for _, t := range c.Tables() {
		cols, ok := s.tables[t.Name()]
		if !ok {
			s.tables[t.Name()] = physTable(t)
			continue
		}
		for _, want := range physTable(t) {
			if !slices.ContainsFunc(cols, func(p physColumn) bool { return p.name == want.name }) {
				cols = append(cols, physColumn{name: want.name, typ: want.typ})
			}
		}
		s.tables[t.Name()] = cols
	}
	if err := rewriteGrown(c, old, parts); err != nil {
		return err
	}
	s.compiled = c
	s.marker = &store.Marker{SchemaVersion: c.Version(), Layout: c.Layout()}
	now := time.Now().UnixMilli()
	for _, d := range decls {
		s.install(d, now)
	}
	if !s.is("bump-keeps-fences") {
		for id := range s.parts {
			s.raiseFence(id, c.Version())
		}
	}
	return nil
}

// rewriteGrown re-encodes the rows and logged changes of the tables whose
// layout grew, with NULLs for the appended columns.
func rewriteGrown(c *schema.Compiled, old schema.Layout, parts map[string]*memPartition) error {
	for _, t := range c.Tables() {
		before, ok := old.Table(t.Name())
		if !ok || len(before) >= len(t.Columns()) {
			continue
		}
		wc := make([]wire.Column, len(before))
		for i, col := range before {
			wc[i] = wire.Column{Name: col.Name, Type: col.Type, Nullable: col.Nullable}
		}
		decode, err := wire.NewRowCodec(wc, t.Columns()[t.PrimaryKey()].Name)
		if err != nil {
			return err
		}
		grow := func(payload []byte) ([]byte, []wire.Value, error) {
			vals, err := decode.DecodeRow(payload)
			if err != nil {
				return nil, nil, err
			}
			for len(vals) < len(t.Columns()) {
				vals = append(vals, wire.Value{Null: true})
			}
			out, err := t.RowCodec().AppendRow(nil, vals)
			return out, vals, err
		}
		for _, p := range parts {
			for k, r := range p.rows {
				if k.table != t.Name() {
					continue
				}
				if r.Payload, p.values[k], err = grow(r.Payload); err != nil {
					return err
				}
				p.rows[k] = r
			}
			for i := range p.commits {
				changes := slices.Clone(p.commits[i].Changes)
				for j, ch := range changes {
					if ch.Table == t.Name() && ch.Payload != nil {
						if changes[j].Payload, _, err = grow(ch.Payload); err != nil {
							return err
						}
					}
				}
				p.commits[i].Changes = changes
			}
		}
	}
	return nil
}

// install inserts a declared checkpoint unless it exists and raises the
// fence; s.mu is held.
func (s *memStore) install(d store.CheckpointDeclaration, nowMs int64) {
	k := cpKey{d.Partition, d.Name}
	if _, ok := s.checkpoints[k]; !ok || s.is("redeclare-resets") {
		s.checkpoints[k] = store.Checkpoint{Partition: d.Partition, Name: d.Name, SchemaVersion: d.SchemaVersion,
			State: store.CheckpointDeclared, UpdatedAtMs: nowMs}
	}
	s.raiseFence(d.Partition, d.SchemaVersion)
}

func (s *memStore) raiseFence(partition string, version int32) {
	if cur, ok := s.fences[partition]; !ok || version > cur || s.is("fence-lowered") {
		s.fences[partition] = version
	}
}

// checkFence is the fence trigger: an append stamped with an older
// version than the partition's fence is rejected.
func (s *memStore) checkFence(partition string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	required, ok := s.fences[partition]
	var version int32
	if s.compiled != nil {
		version = s.compiled.Version()
	}
	if ok && version < required && !s.is("fence-unchecked") {
		return &store.Error{Code: store.CodeWriterFenceRejected, Message: "append rejected by the writer fence"}
	}
	return nil
}

func notDeclared(partition, name string) error {
	return &store.Error{Code: store.CodeCheckpointNotDeclared, Message: "no such checkpoint",
		Details: map[string]any{"partition": partition, "name": name}}
}

func (s *memStore) DeclareCheckpoint(_ context.Context, d store.CheckpointDeclaration, nowMs int64) (store.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Checkpoint{}, store.ErrClosed
	}
	s.install(d, nowMs)
	return s.checkpoints[cpKey{d.Partition, d.Name}], nil
}

func (s *memStore) ClaimCheckpoint(_ context.Context, partition, name string, nowMs int64) (store.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Checkpoint{}, store.ErrClosed
	}
	k := cpKey{partition, name}
	cp, ok := s.checkpoints[k]
	if !ok {
		return store.Checkpoint{}, notDeclared(partition, name)
	}
	if cp.State == store.CheckpointActivated && !s.is("claim-activated") {
		return cp, nil
	}
	cp.OwnerEpoch++
	cp.State, cp.UpdatedAtMs = store.CheckpointBackfilling, nowMs
	s.checkpoints[k] = cp
	return cp, nil
}

// advance is the compare-and-set of AdvanceCheckpoint; s.mu is held. It
// returns the checkpoint before the change.
func (s *memStore) advance(partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (store.Checkpoint, bool) {
	k := cpKey{partition, name}
	cp, ok := s.checkpoints[k]
	if !ok || (cp.OwnerEpoch != ownerEpoch && !s.is("stale-owner-advances")) {
		return cp, false
	}
	next := cp
	next.Watermark, next.ObservedRows, next.UpdatedAtMs = watermark, observedRows, nowMs
	s.checkpoints[k] = next
	return cp, true
}

func (s *memStore) AdvanceCheckpoint(_ context.Context, partition, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, store.ErrClosed
	}
	_, ok := s.advance(partition, name, ownerEpoch, watermark, observedRows, nowMs)
	return ok, nil
}

func (s *memStore) ActivateCheckpoint(_ context.Context, partition, name string, ownerEpoch, watermark int64, sources []string, nowMs int64) (store.Activation, error) {
	p, err := s.part(partition, true)
	if err != nil {
		return "", err
	}
	p.mu.Lock() // the partition's write boundary
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := cpKey{partition, name}
	cp, ok := s.checkpoints[k]
	if !ok {
		return "", notDeclared(partition, name)
	}
	if fence, ok := s.fences[partition]; !ok || fence < cp.SchemaVersion {
		return "", &store.Error{Code: store.CodeCheckpointFenceMissing, Message: "the checkpoint's partition has no writer fence at its version",
			Details: map[string]any{"partition": partition, "name": name}}
	}
	cov := s.coverage(p, sources, watermark)
	if s.is("activate-ignores-sources") || (s.is("activate-pruned-clean") && cov == store.CoverageUnverifiable) {
		cov = store.CoverageClean
	}
	switch cov {
	case store.CoverageChanged:
		return store.Stale, nil
	case store.CoverageUnverifiable:
		return store.Unverifiable, nil
	}
	if cp.OwnerEpoch != ownerEpoch || cp.State == store.CheckpointActivated {
		return store.Stale, nil
	}
	cp.State, cp.Watermark, cp.UpdatedAtMs = store.CheckpointActivated, watermark, nowMs
	s.checkpoints[k] = cp
	return store.Activated, nil
}

// coverage answers HasSourceChangesAbove on a locked partition.
func (s *memStore) coverage(p *memPartition, sources []string, seq int64) store.Coverage {
	if len(sources) == 0 {
		return store.CoverageClean
	}
	for _, c := range p.commits {
		if c.Seq <= seq {
			continue
		}
		for _, ch := range c.Changes {
			if slices.Contains(sources, ch.Table) {
				return store.CoverageChanged
			}
		}
	}
	if p.horizon > seq {
		return store.CoverageUnverifiable
	}
	return store.CoverageClean
}

func (s *memStore) ReadCheckpoints(_ context.Context, partition string) ([]store.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []store.Checkpoint
	for k, cp := range s.checkpoints {
		if k.partition == partition {
			out = append(out, cp)
		}
	}
	slices.SortFunc(out, func(a, b store.Checkpoint) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// gate reads the serve gate; the partition (nil when unknown) is locked.
func (s *memStore) gate(partition string, p *memPartition, running int32) store.ServeGate {
	var g store.ServeGate
	if p != nil && p.registered {
		g.LogEpoch = p.epoch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker != nil {
		g.StoredSchemaVersion = s.marker.SchemaVersion
	}
	g.WriterFence = s.fences[partition]
	for k, cp := range s.checkpoints {
		if (cp.SchemaVersion == running || s.is("gate-all-versions")) && cp.State != store.CheckpointActivated {
			g.Pending = append(g.Pending, store.CheckpointRef{Partition: k.partition, Name: k.name})
		}
	}
	return g
}

func (s *memStore) ReadServeGate(_ context.Context, partition string, running int32) (store.ServeGate, error) {
	p, err := s.part(partition, false)
	if err != nil {
		return store.ServeGate{}, err
	}
	if p != nil {
		p.mu.RLock()
		defer p.mu.RUnlock()
	}
	return s.gate(partition, p, running), nil
}

func (s *memStore) SourceCoverageSeq(_ context.Context, partition string, sources []string) (int64, error) {
	p, err := s.part(partition, false)
	if err != nil || p == nil {
		return 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var seq int64
	for _, c := range p.commits {
		for _, ch := range c.Changes {
			if slices.Contains(sources, ch.Table) || s.is("coverage-all-tables") {
				seq = max(seq, c.Seq)
			}
		}
	}
	return seq, nil
}

func (s *memStore) HasSourceChangesAbove(_ context.Context, partition string, sources []string, seq int64) (store.Coverage, error) {
	p, err := s.part(partition, false)
	if err != nil || p == nil {
		return store.CoverageClean, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return s.coverage(p, sources, seq), nil
}

func (tx *memTx) ServeGate(_ context.Context, running int32) (store.ServeGate, error) {
	return tx.s.gate(tx.id, tx.p, running), nil
}

func (tx *memTx) AdvanceCheckpoint(_ context.Context, name string, ownerEpoch, watermark, observedRows, nowMs int64) (bool, error) {
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.advance(tx.id, name, ownerEpoch, watermark, observedRows, nowMs)
	if ok && !s.is("tx-advance-kept") {
		tx.undo = append(tx.undo, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.checkpoints[cpKey{tx.id, name}] = prev
		})
	}
	return ok, nil
}

// Reopen returns another store on the same database.
func (s *memStore) Reopen(t testing.TB) store.Store {
	o := &memStore{memDB: s.memDB, fault: s.fault}
	t.Cleanup(func() {
		if err := o.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Error(err)
		}
	})
	return o
}

// The statements ExecRaw understands: the suite's damage scripts.
var (
	reDropTable  = regexp.MustCompile(`^DROP TABLE "([^"]+)"$`)
	reDropColumn = regexp.MustCompile(`^ALTER TABLE "([^"]+)" DROP COLUMN "([^"]+)"$`)
	reAddColumn  = regexp.MustCompile(`^ALTER TABLE "([^"]+)" ADD COLUMN "([^"]+)" (\w+)$`)
	reCreate     = regexp.MustCompile(`(?s)^CREATE TABLE "([^"]+)" \((.*)\)$`)
	reColumnDef  = regexp.MustCompile(`^"([^"]+)" (\w+)( NOT NULL)?$`)
)

// ExecRaw applies the statements of a script it understands to the
// database, all or none.
func (s *memStore) ExecRaw(_ context.Context, script string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tables := maps.Clone(s.tables)
	fences := maps.Clone(s.fences)
	for stmt := range strings.SplitSeq(script, ";") {
		stmt = strings.Join(strings.Fields(stmt), " ")
		if stmt == "" {
			continue
		}
		if m := reDropTable.FindStringSubmatch(stmt); m != nil {
			if _, ok := tables[m[1]]; !ok {
				return fmt.Errorf("exec raw: no table %q", m[1])
			}
			delete(tables, m[1])
		} else if m := reDropColumn.FindStringSubmatch(stmt); m != nil {
			cols := tables[m[1]]
			i := slices.IndexFunc(cols, func(c physColumn) bool { return c.name == m[2] })
			if i < 0 {
				return fmt.Errorf("exec raw: no column %q", m[2])
			}
			tables[m[1]] = slices.Delete(slices.Clone(cols), i, i+1)
		} else if m := reAddColumn.FindStringSubmatch(stmt); m != nil {
			tables[m[1]] = append(slices.Clone(tables[m[1]]), physColumn{name: m[2], typ: m[3]})
		} else if m := reCreate.FindStringSubmatch(stmt); m != nil {
			cols, err := parseColumns(m[2])
			if err != nil {
				return err
			}
			tables[m[1]] = cols
		} else if stmt == "DELETE FROM sync_writer_fence" {
			clear(fences)
		} else {
			return fmt.Errorf("exec raw: unsupported statement %q", stmt)
		}
	}
	s.tables, s.fences = tables, fences
	return nil
}

func parseColumns(defs string) ([]physColumn, error) {
	var cols []physColumn
	var key []string
	for def := range strings.SplitSeq(defs, ",") {
		def = strings.TrimSpace(def)
		if rest, ok := strings.CutPrefix(def, "PRIMARY KEY ("); ok {
			key = []string{strings.Trim(rest, `" )`)}
			continue
		}
		if key != nil {
			key = append(key, strings.Trim(def, `" )`))
			continue
		}
		if m := reColumnDef.FindStringSubmatch(def); m != nil {
			cols = append(cols, physColumn{name: m[1], typ: m[2], notNull: m[3] != ""})
			continue
		}
		return nil, fmt.Errorf("exec raw: unsupported column definition %q", def)
	}
	for i, name := range key {
		j := slices.IndexFunc(cols, func(c physColumn) bool { return c.name == name })
		if j < 0 {
			return nil, fmt.Errorf("exec raw: key column %q is not a column", name)
		}
		cols[j].pk = i + 1
	}
	return cols, nil
}
