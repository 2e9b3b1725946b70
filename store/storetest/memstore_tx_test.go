package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func (s *memStore) Client(_ context.Context, id, clientID string) (store.ClientRecord, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return store.ClientRecord{}, cmp.Or(err, store.ErrNotFound)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	c, ok := p.clients[clientID]
	if !ok {
		return store.ClientRecord{}, store.ErrNotFound
	}
	rec := c.rec
	rec.Subscriptions, err = store.DecodeSubscriptions(c.subs)
	return rec, err
}

func (s *memStore) PutClient(_ context.Context, id string, rec store.ClientRecord) error {
	p, err := s.part(id, true)
	if err != nil {
		return err
	}
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return err
	}
	rec.Subscriptions = nil
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[rec.ClientID]; ok && c.rec.ActorID != rec.ActorID && !s.is("rebind-client") {
		return store.ErrClientBound
	}
	p.clients[rec.ClientID] = memClient{rec: rec, subs: subs}
	return nil
}

func (s *memStore) BindClient(_ context.Context, id string, rec store.ClientRecord) (store.ClientRecord, error) {
	p, err := s.part(id, true)
	if err != nil {
		return store.ClientRecord{}, err
	}
	subs, err := store.EncodeSubscriptions(rec.Subscriptions)
	if err != nil {
		return store.ClientRecord{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[rec.ClientID]; ok && !s.is("bind-overwrites") {
		out := c.rec
		out.Subscriptions, err = store.DecodeSubscriptions(c.subs)
		return out, err
	}
	stored := rec
	stored.Subscriptions = nil
	p.clients[rec.ClientID] = memClient{rec: stored, subs: subs}
	return rec, nil
}

func (s *memStore) AdvanceClientCursor(_ context.Context, id string, a store.CursorAdvance) (bool, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return false, cmp.Or(err, store.ErrEpochMismatch)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered || p.epoch != a.LogEpoch {
		return false, store.ErrEpochMismatch
	}
	c, ok := p.clients[a.ClientID]
	if !ok || c.rec.ActorID != a.ActorID || (c.rec.Cursor >= a.Cursor && !s.is("advance-backwards")) ||
		!store.StoredSubscriptionsMatch(a, c.subs, store.DecodeSubscriptions) {
		return false, nil
	}
	c.rec.Cursor, c.rec.UpdatedAtMs = a.Cursor, max(c.rec.UpdatedAtMs, a.AtMs)
	p.clients[a.ClientID] = c
	return true, nil
}

func (s *memStore) ActiveCursorFloor(_ context.Context, id string, sinceMs int64) (int64, bool, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return 0, false, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var floor int64
	found := false
	for _, c := range p.clients {
		if c.rec.UpdatedAtMs >= sinceMs && (c.rec.Cursor >= 0 || s.is("floor-counts-no-cursor")) && (!found || c.rec.Cursor < floor) {
			floor, found = c.rec.Cursor, true
		}
	}
	return floor, found, nil
}

func (s *memStore) CommitSeqBefore(_ context.Context, id string, beforeMs int64) (int64, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var seq int64
	for _, c := range p.commits {
		if c.CreatedAtMs < beforeMs {
			seq = max(seq, c.Seq)
		}
	}
	return seq, nil
}

func (s *memStore) PruneThrough(_ context.Context, id, logEpoch string, throughSeq int64) (store.PruneResult, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return store.PruneResult{}, cmp.Or(err, store.ErrNotFound)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered {
		return store.PruneResult{}, store.ErrNotFound
	}
	if p.epoch != logEpoch && !s.is("prune-any-epoch") {
		return store.PruneResult{}, &store.Error{Code: store.CodePruneEpochMismatch, Message: "log epoch changed", Err: store.ErrEpochMismatch}
	}
	through := min(throughSeq, p.maxSeq)
	if s.is("prune-uncapped") {
		through = throughSeq
	}
	if s.is("prune-lowers-horizon") && through < p.horizon {
		p.horizon = through
	}
	if through <= p.horizon {
		return store.PruneResult{HorizonSeq: p.horizon}, nil
	}
	n := len(p.commits)
	p.commits = slices.DeleteFunc(p.commits, func(c store.Commit) bool { return c.Seq <= through })
	for k, seq := range p.tombstones {
		if seq <= through {
			delete(p.tombstones, k)
		}
	}
	p.horizon = through
	return store.PruneResult{HorizonSeq: through, CommitsDeleted: int64(n - len(p.commits))}, nil
}

func (s *memStore) Stats() store.Stats {
	return store.Stats{Writes: s.writes.Load(), WriteErrors: s.writeErrors.Load(), Batches: s.batches.Load(), Commits: s.commits.Load()}
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	return nil
}

// memTx is a write transaction: it mutates its partition, which the
// Write holds locked, and records how to undo each mutation.
type memTx struct {
	s    *memStore
	p    *memPartition
	id   string
	undo []func()
}

var _ store.WriteTx = (*memTx)(nil)

func (tx *memTx) rollbackTo(mark int) {
	for i := len(tx.undo) - 1; i >= mark; i-- {
		tx.undo[i]()
	}
	tx.undo = tx.undo[:mark]
}

func (tx *memTx) Partition() string { return tx.id }

func (tx *memTx) Row(_ context.Context, table, rowID string) (store.Row, error) {
	if _, err := tx.s.table(table); err != nil {
		return store.Row{}, err
	}
	r, ok := tx.p.rows[rowKey{table, rowID}]
	if !ok {
		return store.Row{}, store.ErrNotFound
	}
	return cloneRow(r), nil
}

func (tx *memTx) Tombstone(_ context.Context, table, rowID string) (int64, bool, error) {
	seq, ok := tx.p.tombstones[rowKey{table, rowID}]
	return seq, ok, nil
}

// setTombstone sets (ok) or clears the tombstone of k, with its undo.
func (tx *memTx) setTombstone(k rowKey, seq int64, ok bool) {
	prev, had := tx.p.tombstones[k]
	if ok {
		tx.p.tombstones[k] = seq
	} else {
		delete(tx.p.tombstones, k)
	}
	tx.undo = append(tx.undo, func() {
		if had {
			tx.p.tombstones[k] = prev
		} else {
			delete(tx.p.tombstones, k)
		}
	})
}

func (tx *memTx) ClearTombstone(_ context.Context, table, rowID string) error {
	tx.setTombstone(rowKey{table, rowID}, 0, false)
	return nil
}

// setRow writes (ok) or deletes the row of k, with its undo.
func (tx *memTx) setRow(k rowKey, r store.Row, values []wire.Value, ok bool) {
	prev, had := tx.p.rows[k]
	prevValues := tx.p.values[k]
	if ok {
		tx.p.rows[k], tx.p.values[k] = r, values
	} else {
		delete(tx.p.rows, k)
		delete(tx.p.values, k)
	}
	tx.undo = append(tx.undo, func() {
		if had {
			tx.p.rows[k], tx.p.values[k] = prev, prevValues
		} else {
			delete(tx.p.rows, k)
			delete(tx.p.values, k)
		}
	})
}

func (tx *memTx) UpsertRow(_ context.Context, w store.RowWrite) error {
	t, err := tx.s.table(w.Table)
	if err != nil {
		return err
	}
	values := w.Values
	if values == nil {
		if values, err = t.RowCodec().DecodeRow(w.Payload); err != nil {
			return fmt.Errorf("upsert row: %w", err)
		}
	}
	k := rowKey{w.Table, w.RowID}
	row := cloneRow(w.Row)
	if prev, ok := tx.p.rows[k]; ok && tx.s.is("scopes-stale-on-replace") {
		row.Scopes = prev.Scopes
	}
	for _, ix := range t.Indexes() {
		if !ix.Unique {
			continue
		}
		for other, ov := range tx.p.values {
			if other.table == w.Table && other != k && sameIndexKey(t.ColumnIndex, ix.Columns, values, ov) {
				return &store.ConstraintError{Table: w.Table, Constraint: ix.Name, Err: errors.New("duplicate key")}
			}
		}
	}
	tx.setRow(k, row, slices.Clone(values), true)
	return nil
}

func sameIndexKey(index func(string) (int, bool), columns []string, a, b []wire.Value) bool {
	for _, c := range columns {
		i, _ := index(c)
		if a[i].Null || b[i].Null || a[i].Str != b[i].Str || a[i].Int != b[i].Int {
			return false
		}
	}
	return true
}

func (tx *memTx) DeleteRow(_ context.Context, table, rowID string) error {
	if _, err := tx.s.table(table); err != nil {
		return err
	}
	if _, ok := tx.p.rows[rowKey{table, rowID}]; ok {
		tx.setRow(rowKey{table, rowID}, store.Row{}, nil, false)
	}
	return nil
}

func (tx *memTx) PushResult(_ context.Context, clientID, commitID string) (store.PushRecord, error) {
	if tx.s.is("tx-result-invisible") {
		return store.PushRecord{}, store.ErrNotFound
	}
	return tx.p.pushResult(clientID, commitID)
}

func (tx *memTx) PutPushResult(_ context.Context, clientID, commitID string, rec store.PushRecord) (bool, error) {
	k := resultKey{clientID, commitID}
	if _, ok := tx.p.results[k]; ok && !tx.s.is("put-result-overwrites") {
		return false, nil
	}
	b, err := store.EncodePushRecord(rec)
	if err != nil {
		return false, err
	}
	tx.p.results[k] = b
	tx.undo = append(tx.undo, func() { delete(tx.p.results, k) })
	return true, nil
}

func (tx *memTx) AppendCommit(_ context.Context, c store.NewCommit) (int64, error) {
	if err := tx.s.checkFence(tx.id); err != nil {
		return 0, err
	}
	tx.p.maxSeq++
	seq := tx.p.maxSeq
	changes := make([]store.Change, len(c.Changes))
	for i, ch := range c.Changes {
		ch.Scopes, ch.Payload = slices.Clone(ch.Scopes), slices.Clone(ch.Payload)
		changes[i] = ch
	}
	tx.p.commits = append(tx.p.commits, store.Commit{Seq: seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID,
		ClientID: c.ClientID, ClientCommitID: c.ClientCommitID, Changes: changes})
	tx.undo = append(tx.undo, func() {
		if !tx.s.is("rollback-keeps-seq") {
			tx.p.maxSeq--
		}
		tx.p.commits = tx.p.commits[:len(tx.p.commits)-1]
	})
	for _, ch := range changes {
		if ch.Op == wire.OpDelete && !tx.s.is("no-tombstones") {
			tx.setTombstone(rowKey{ch.Table, ch.RowID}, seq, true)
		}
	}
	return seq, nil
}

func (tx *memTx) Candidate(ctx context.Context, fn func(ctx context.Context) error) error {
	mark := len(tx.undo)
	err := fn(ctx)
	if err != nil && !tx.s.is("candidate-keeps-writes") {
		tx.rollbackTo(mark)
	}
	return err
}
