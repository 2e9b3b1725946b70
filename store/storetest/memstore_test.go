package storetest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// memStore is a store.Store in memory, written only to run the suite
// against something: it tests the tests. Each partition has a lock that
// a Write holds for the whole of its function (readers of the partition
// wait for it, so they never see uncommitted writes); a write transaction
// mutates the partition in place and keeps an undo log for rollbacks and
// candidates.
type memStore struct {
	// memDB is the database, shared with the stores Reopen returns; its
	// mutex also guards closed and compiled.
	*memDB
	closed   bool
	compiled *schema.Compiled
	// fault names a bug to inject (see faults in storetest_test.go).
	fault string

	writes, writeErrors, batches, commits atomic.Int64
}

// memDB is what a database holds.
type memDB struct {
	mu     sync.Mutex
	marker *store.Marker
	parts  map[string]*memPartition
	// checkpoints, fences and tables are the migration barrier's state
	// (memstore_barrier_test.go); tables is the physical layout of the app
	// tables, as SQLite would declare them.
	checkpoints map[cpKey]store.Checkpoint
	fences      map[string]int32
	tables      map[string][]physColumn
}

type resultKey struct{ client, commit string }

type memPartition struct {
	mu         sync.RWMutex
	registered bool
	epoch      string
	required   bool
	lastAuth   int64
	maxSeq     int64
	horizon    int64
	commits    []store.Commit
	rows       map[rowKey]store.Row
	values     map[rowKey][]wire.Value
	tombstones map[rowKey]int64
	results    map[resultKey][]byte
	clients    map[string]memClient
}

// memClient is a client record with its subscriptions in their stored
// JSON, as a database holds them.
type memClient struct {
	rec  store.ClientRecord
	subs []byte
}

func newMemStore() *memStore {
	return &memStore{memDB: &memDB{
		parts:       make(map[string]*memPartition),
		checkpoints: make(map[cpKey]store.Checkpoint),
		fences:      make(map[string]int32),
		tables:      make(map[string][]physColumn),
	}}
}

var _ store.Store = (*memStore)(nil)

func (s *memStore) is(fault string) bool { return s.fault == fault }

// match is store.MatchScopes, or a wrong reading under a fault.
func (s *memStore) match(stored wire.StoredScopes, effective wire.ScopeMap) bool {
	if !s.is("scopes-any-key") {
		return store.MatchScopes(stored, effective)
	}
	for _, e := range effective {
		if store.MatchScopes(stored, wire.ScopeMap{e}) {
			return true
		}
	}
	return false
}

// compareIDs orders row ids bytewise, or by UTF-16 under a fault.
func (s *memStore) compareIDs(a, b string) int {
	if s.is("scan-utf16-order") {
		return wire.CompareKeys(a, b)
	}
	return cmp.Compare(a, b)
}

func (s *memStore) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// part returns the partition, creating it when create is set; nil when
// absent.
func (s *memStore) part(id string, create bool) (*memPartition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	p := s.parts[id]
	if p == nil && create {
		p = &memPartition{
			rows:       make(map[rowKey]store.Row),
			values:     make(map[rowKey][]wire.Value),
			tombstones: make(map[rowKey]int64),
			results:    make(map[resultKey][]byte),
			clients:    make(map[string]memClient),
		}
		s.parts[id] = p
	}
	return p, nil
}

func (s *memStore) table(name string) (*schema.CompiledTable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compiled == nil {
		return nil, store.ErrNoSchema
	}
	t, ok := s.compiled.Table(name)
	if !ok {
		return nil, store.ErrUnknownTable
	}
	return t, nil
}

func (s *memStore) EnsureSchema(ctx context.Context, c *schema.Compiled) error {
	return s.EnsureSchemaWith(ctx, c, nil)
}

func (s *memStore) Marker(context.Context) (store.Marker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Marker{}, store.ErrClosed
	}
	if s.marker == nil {
		return store.Marker{}, store.ErrNotFound
	}
	return *s.marker, nil
}

func (p *memPartition) state(id string) store.Partition {
	return store.Partition{ID: id, LogEpoch: p.epoch, EpochRequired: p.required, LastAuthenticatedAtMs: p.lastAuth,
		MaxCommitSeq: p.maxSeq, HorizonSeq: p.horizon}
}

func (s *memStore) TouchPartition(_ context.Context, id string, nowMs int64, newEpoch string) (store.Partition, error) {
	p, err := s.part(id, true)
	if err != nil {
		return store.Partition{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered || s.is("touch-resets-epoch") {
		p.registered, p.epoch = true, newEpoch
	}
	p.lastAuth = nowMs
	return p.state(id), nil
}

func (s *memStore) Partition(_ context.Context, id string) (store.Partition, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return store.Partition{}, cmp.Or(err, store.ErrNotFound)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.registered {
		return store.Partition{}, store.ErrNotFound
	}
	return p.state(id), nil
}

func (s *memStore) RotateLogEpoch(_ context.Context, id, newEpoch string, _ int64) error {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return cmp.Or(err, store.ErrNotFound)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered {
		return store.ErrNotFound
	}
	p.epoch, p.required = newEpoch, true
	if !s.is("rotate-keeps-clients") {
		p.clients = make(map[string]memClient)
	}
	return nil
}

func (s *memStore) Write(ctx context.Context, id string, fn func(ctx context.Context, tx store.WriteTx) error) error {
	p, err := s.part(id, true)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tx := &memTx{s: s, p: p, id: id}
	before := p.maxSeq
	if err := fn(ctx, tx); err != nil {
		if !s.is("failed-write-kept") {
			tx.rollbackTo(0)
		}
		s.writeErrors.Add(1)
		return err
	}
	if !s.is("stats-uncounted") {
		s.writes.Add(1)
	}
	s.batches.Add(1)
	s.commits.Add(p.maxSeq - before)
	return nil
}

func cloneRow(r store.Row) store.Row {
	r.Scopes = slices.Clone(r.Scopes)
	r.Payload = slices.Clone(r.Payload)
	r.ColumnVersions = slices.Clone(r.ColumnVersions)
	return r
}

func (s *memStore) Row(_ context.Context, id, table, rowID string) (store.Row, error) {
	if _, err := s.table(table); err != nil {
		return store.Row{}, err
	}
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return store.Row{}, cmp.Or(err, store.ErrNotFound)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	r, ok := p.rows[rowKey{table, rowID}]
	if !ok {
		return store.Row{}, store.ErrNotFound
	}
	return cloneRow(r), nil
}

func (s *memStore) ReadCommitWindow(_ context.Context, id string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	if err := s.open(); err != nil {
		return store.CommitWindow{}, err
	}
	if len(q.Scopes) == 0 {
		return store.CommitWindow{}, store.ErrScanRequiresScope
	}
	p, _ := s.part(id, false)
	if p == nil {
		return store.CommitWindow{Complete: true}, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out store.CommitWindow
	total := 0
	for _, c := range p.commits {
		if c.Seq <= q.AfterSeq || c.Seq > q.ThroughSeq {
			continue
		}
		var changes []store.Change
		for _, ch := range c.Changes {
			if ch.Table == q.Table && s.match(ch.Scopes, q.Scopes) {
				changes = append(changes, ch)
			}
		}
		if len(changes) == 0 {
			continue
		}
		if q.LimitChanges > 0 && len(out.Commits) > 0 && (total+len(changes) > q.LimitChanges || s.is("limit-one-commit")) {
			return out, nil
		}
		if q.LimitChanges > 0 && total+len(changes) > q.LimitChanges && s.is("limit-splits-commits") {
			c.Changes = changes[:max(q.LimitChanges-total, 1)]
			out.Commits = append(out.Commits, c)
			return out, nil
		}
		c.Changes = changes
		out.Commits = append(out.Commits, c)
		total += len(changes)
	}
	out.Complete = true
	return out, nil
}

func (s *memStore) ScanRows(_ context.Context, id string, q store.RowScanQuery) ([]store.Row, error) {
	if _, err := s.table(q.Table); err != nil {
		return nil, err
	}
	if len(q.Scopes) == 0 {
		return nil, store.ErrScanRequiresScope
	}
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []store.Row
	for k, r := range p.rows {
		if k.table == q.Table && (q.After == nil || s.compareIDs(r.RowID, *q.After) > 0) && s.match(r.Scopes, q.Scopes) {
			out = append(out, cloneRow(r))
		}
	}
	slices.SortFunc(out, func(a, b store.Row) int { return s.compareIDs(a.RowID, b.RowID) })
	return out[:min(len(out), max(q.Limit, 0))], nil
}

// PageBoundaries pages through ScanRows: the model needs no index.
func (s *memStore) PageBoundaries(ctx context.Context, id string, q store.RowScanQuery, pages int) ([]string, error) {
	if len(q.Scopes) > 1 {
		return nil, store.ErrBoundariesOneKey
	}
	var out []string
	for len(out) < pages {
		rows, err := s.ScanRows(ctx, id, store.RowScanQuery{Table: q.Table, Scopes: q.Scopes, After: q.After, Limit: q.Limit + 1})
		if err != nil || len(rows) <= q.Limit {
			return out, err
		}
		last := rows[q.Limit-1].RowID
		out = append(out, last)
		q.After = &last
	}
	return out, nil
}

func (s *memStore) PushResult(_ context.Context, id, clientID, commitID string) (store.PushRecord, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return store.PushRecord{}, cmp.Or(err, store.ErrNotFound)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pushResult(clientID, commitID)
}

func (p *memPartition) pushResult(clientID, commitID string) (store.PushRecord, error) {
	b, ok := p.results[resultKey{clientID, commitID}]
	if !ok {
		return store.PushRecord{}, store.ErrNotFound
	}
	return store.DecodePushRecord(b)
}
