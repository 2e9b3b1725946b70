package storetest

import (
	"slices"
	"strings"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// inScopes is the suite's own reading of §3.2: stored scopes lie inside
// effective scopes when, for every effective key, the stored value for
// that key is one of the key's values. Empty effective scopes match
// nothing. (It deliberately does not call store.MatchScopes.)
func inScopes(stored wire.StoredScopes, effective wire.ScopeMap) bool {
	if len(effective) == 0 {
		return false
	}
	values := make(map[string]string, len(stored))
	for _, s := range stored {
		values[s.Key] = s.Value
	}
	for _, e := range effective {
		v, ok := values[e.Key]
		if !ok || !slices.Contains(e.Values, v) {
			return false
		}
	}
	return true
}

type rowKey struct{ table, id string }

// logModel is the reference model of a partition: its current rows and
// its log above the horizon.
type logModel struct {
	rows    map[rowKey]store.Row
	commits []store.Commit
	horizon int64
}

func newLogModel() *logModel { return &logModel{rows: make(map[rowKey]store.Row)} }

// apply records a committed commit and its row writes.
func (m *logModel) apply(c store.Commit, writes []store.RowWrite) {
	for _, ch := range c.Changes {
		if ch.Op == wire.OpDelete {
			delete(m.rows, rowKey{ch.Table, ch.RowID})
		}
	}
	for _, w := range writes {
		m.rows[rowKey{w.Table, w.RowID}] = w.Row
	}
	m.commits = append(m.commits, c)
}

// prune drops the commits through seq.
func (m *logModel) prune(seq int64) {
	m.horizon = max(m.horizon, seq)
	m.commits = slices.DeleteFunc(m.commits, func(c store.Commit) bool { return c.Seq <= m.horizon })
}

// window returns the commits of (after, through] with a change of table
// inside scopes, holding only those changes.
func (m *logModel) window(table string, scopes wire.ScopeMap, after, through int64) []store.Commit {
	var out []store.Commit
	for _, c := range m.commits {
		if c.Seq <= after || c.Seq > through {
			continue
		}
		var changes []store.Change
		for _, ch := range c.Changes {
			if ch.Table == table && inScopes(ch.Scopes, scopes) {
				changes = append(changes, ch)
			}
		}
		if len(changes) > 0 {
			c.Changes = changes
			out = append(out, c)
		}
	}
	return out
}

// scan returns the current rows of table inside scopes by bytewise row id.
func (m *logModel) scan(table string, scopes wire.ScopeMap) []store.Row {
	var out []store.Row
	for k, r := range m.rows {
		if k.table == table && inScopes(r.Scopes, scopes) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Row) int { return strings.Compare(a.RowID, b.RowID) })
	return out
}

// after returns the rows whose id sorts after id.
func rowsAfter(rows []store.Row, id *string) []store.Row {
	if id == nil {
		return rows
	}
	i, found := slices.BinarySearchFunc(rows, *id, func(r store.Row, id string) int { return strings.Compare(r.RowID, id) })
	if found {
		i++
	}
	return rows[i:]
}

func changeCount(commits []store.Commit) int {
	n := 0
	for _, c := range commits {
		n += len(c.Changes)
	}
	return n
}
