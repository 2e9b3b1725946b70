package storetest

import (
	"context"
	"slices"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func (s *memStore) ListRows(_ context.Context, id, table string, after *string, limit int) ([]store.Row, error) {
	if _, err := s.table(table); err != nil {
		return nil, err
	}
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []store.Row
	for k, r := range p.rows {
		if k.table == table && (after == nil || r.RowID > *after) {
			out = append(out, cloneRow(r))
		}
	}
	slices.SortFunc(out, func(a, b store.Row) int { return s.compareIDs(a.RowID, b.RowID) })
	return out[:min(len(out), max(limit, 0))], nil
}

func (s *memStore) LatestScopedChangeSeq(_ context.Context, id, table string, scope wire.ScopeValues) (int64, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var latest int64
	for _, c := range p.commits {
		for _, ch := range c.Changes {
			for _, sc := range ch.Scopes {
				if ch.Table == table && sc.Key == scope.Key && slices.Contains(scope.Values, sc.Value) {
					latest = max(latest, c.Seq)
				}
			}
		}
	}
	return latest, nil
}

func (tx *memTx) RowsByColumn(_ context.Context, table, column string, value wire.Value, limit int) ([]store.Row, error) {
	t, err := tx.s.table(table)
	if err != nil {
		return nil, err
	}
	ci, _ := t.ColumnIndex(column)
	typ := t.Columns()[ci].Type
	want, _ := schema.RenderValue(typ, value)
	var out []store.Row
	for k, r := range tx.p.rows {
		if k.table != table {
			continue
		}
		if got, ok := schema.RenderValue(typ, tx.p.values[k][ci]); ok && got == want {
			out = append(out, cloneRow(r))
		}
	}
	slices.SortFunc(out, func(a, b store.Row) int { return tx.s.compareIDs(a.RowID, b.RowID) })
	return out[:min(len(out), limit)], nil
}

func (s *memStore) ReadCommits(_ context.Context, id string, after, through int64, limit int) ([]store.Commit, error) {
	p, err := s.part(id, false)
	if err != nil || p == nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []store.Commit
	for _, c := range p.commits {
		if c.Seq > after && c.Seq <= through && len(out) < limit {
			cc := c
			cc.Changes = append([]store.Change(nil), c.Changes...)
			out = append(out, cc)
		}
	}
	return out, nil
}
