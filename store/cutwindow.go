package store

import (
	"slices"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/wire"
)

// ShareKey identifies the short window reads that one shared read may
// answer (CutWindow cuts each answer from it): the partition, the table,
// the first scope key, whether the commits' client ids are read
// (WireOnly), and the state read after (the running version it is read
// at).
func ShareKey(partition string, q CommitWindowQuery) string {
	var b strings.Builder
	b.WriteString(partition)
	b.WriteByte(0)
	b.WriteString(q.Table)
	b.WriteByte(0)
	b.WriteString(q.Scopes[0].Key)
	b.WriteByte(0)
	if q.WireOnly {
		b.WriteByte('w')
	}
	if q.StateAfter {
		b.WriteString(strconv.Itoa(int(q.Running)))
	}
	return b.String()
}

// CutWindow is the answer to q from a complete window over a range that
// holds q's, read for scopes that hold q's: the commits of q's range with
// their changes in q's scopes (a commit without any left out), up to q's
// change limit (a commit is never split, and the first is kept whole), and
// the state read after them. The changes are shared, read-only, with the
// other answers.
func CutWindow(all CommitWindow, q CommitWindowQuery) CommitWindow {
	win := CommitWindow{Complete: true, State: all.State}
	if win.State != nil {
		st := *all.State // each answer its own copy
		win.State = &st
	}
	changes := 0
	for _, c := range all.Commits {
		if c.Seq <= q.AfterSeq {
			continue
		}
		if c.Seq > q.ThroughSeq {
			break
		}
		kept := matchingChanges(c.Changes, q.Scopes)
		if len(kept) == 0 {
			continue
		}
		if q.LimitChanges > 0 && len(win.Commits) > 0 && changes+len(kept) > q.LimitChanges {
			win.Complete = false
			break
		}
		c.Changes = kept
		win.Commits = append(win.Commits, c)
		changes += len(kept)
	}
	return win
}

// matchingChanges returns the changes in scopes: chs itself when all are,
// else a new slice.
func matchingChanges(chs []Change, scopes wire.ScopeMap) []Change {
	for i, ch := range chs {
		if MatchScopes(ch.Scopes, scopes) {
			continue
		}
		kept := slices.Clone(chs[:i])
		for _, ch := range chs[i+1:] {
			if MatchScopes(ch.Scopes, scopes) {
				kept = append(kept, ch)
			}
		}
		return kept
	}
	return chs[:len(chs):len(chs)]
}
