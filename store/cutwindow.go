package store

import (
	"iter"
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

// AnswerShared answers the window queries qs, asked together (one
// ShareKey), with read: one read of the union of their ranges for the
// union of their first key's values (the key they share; no other key,
// no change limit), each answer cut from it (CutWindow), when there are
// several and the union spans at most maxSpan commits; else each query
// read on its own. It returns how many answers a shared read gave.
func AnswerShared(qs []CommitWindowQuery, maxSpan int64, read func(CommitWindowQuery) (CommitWindow, error), reply func(int, CommitWindow, error)) int {
	lo, hi := qs[0].AfterSeq, qs[0].ThroughSeq
	for _, q := range qs[1:] {
		lo, hi = min(lo, q.AfterSeq), max(hi, q.ThroughSeq)
	}
	alone := func() {
		for i, q := range qs {
			win, err := read(q)
			reply(i, win, err)
		}
	}
	if len(qs) == 1 || hi-lo > maxSpan {
		alone()
		return 0
	}
	var values []string
	for _, q := range qs {
		values = append(values, q.Scopes[0].Values...)
	}
	slices.Sort(values)
	u := qs[0]
	u.Scopes = wire.ScopeMap{{Key: u.Scopes[0].Key, Values: slices.Compact(values)}}
	u.AfterSeq, u.ThroughSeq, u.LimitChanges = lo, hi, 0
	all, err := read(u)
	if err == nil && !all.Complete {
		// Not expected without a limit: each reads its own then.
		alone()
		return 0
	}
	for i, q := range qs {
		if err != nil {
			reply(i, CommitWindow{}, err)
			continue
		}
		reply(i, CutWindow(all, q), nil)
	}
	return len(qs)
}

// CutWindow is the answer to q from a complete window over a range that
// holds q's, read for scopes that hold q's: the commits of q's range with
// their changes in q's scopes (a commit without any left out), up to q's
// change limit (a commit is never split, and the first is kept whole), and
// the state read after them. The changes are shared, read-only, with the
// other answers.
func CutWindow(all CommitWindow, q CommitWindowQuery) CommitWindow {
	return CutCommits(slices.Values(all.Commits), all.State, q)
}

// CutCommits is CutWindow over commits given oldest first (those of q's
// table and partition, over a range that holds q's) and the state read
// after them, which each answer gets a copy of.
func CutCommits(commits iter.Seq[Commit], state *RequestState, q CommitWindowQuery) CommitWindow {
	win := CommitWindow{Complete: true}
	if state != nil {
		st := *state // each answer its own copy
		win.State = &st
	}
	changes := 0
	for c := range commits {
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

// EntryShareKey is the key of a shared request entry read (the stores'
// ReadRequestState): the partition and the running version the serve gate
// is read at.
func EntryShareKey(partition string, running int32) string {
	return partition + "\x00" + strconv.Itoa(int(running))
}
