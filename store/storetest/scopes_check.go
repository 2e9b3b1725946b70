package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// fmtScopeMap formats effective scopes.
func fmtScopeMap(m wire.ScopeMap) string {
	s := "{"
	for i, e := range m {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s:%q", e.Key, e.Values)
	}
	return s + "}"
}

// checkWindow reads the window (after, through] of table inside scopes
// with the change limit, page after page until Complete, and compares
// every page and the whole with the model (every other page after the
// first with Bulk set). It reports failures on t and
// returns false after the first.
func (e *env) checkWindow(m *logModel, table string, scopes wire.ScopeMap, after, through int64, limit int) bool {
	t := e.t
	t.Helper()
	what := fmt.Sprintf("window %s (%d, %d] of %s, limit %d", fmtScopeMap(scopes), after, through, table, limit)
	want := m.window(table, scopes, after, through)
	var got []store.Commit
	cursor := after
	for page := 0; ; page++ {
		if page > len(want) {
			t.Errorf("%s: no Complete page after %d pages", what, page)
			return false
		}
		// Every other page after the first is read as a catch-up's read
		// ahead reads it (Bulk), which must not change the answer.
		q := store.CommitWindowQuery{Table: table, Scopes: scopes, AfterSeq: cursor, ThroughSeq: through, LimitChanges: limit,
			Bulk: page%2 == 1}
		res, err := e.s.ReadCommitWindow(e.ctx, "p1", q)
		if err != nil {
			t.Errorf("%s: ReadCommitWindow(after %d): %v", what, cursor, err)
			return false
		}
		if !checkWindowPage(t, fmt.Sprintf("%s, page after %d", what, cursor), res, m.window(table, scopes, cursor, through), table, scopes, limit) {
			return false
		}
		got = append(got, res.Commits...)
		if res.Complete {
			break
		}
		cursor = res.Commits[len(res.Commits)-1].Seq
	}
	if len(got) != len(want) {
		t.Errorf("%s: pages hold %d commits, want %d:\n got %v\nwant %v", what, len(got), len(want), seqs(got), seqs(want))
		return false
	}
	return true
}

// checkWindowPage checks one answer against the matching commits that
// remain in its window.
func checkWindowPage(t *testing.T, what string, res store.CommitWindow, remaining []store.Commit, table string, scopes wire.ScopeMap, limit int) bool {
	t.Helper()
	for i, c := range res.Commits {
		for _, ch := range c.Changes {
			if ch.Table != table || !inScopes(ch.Scopes, scopes) {
				t.Errorf("%s: commit %d has a change outside the query: %s", what, c.Seq, fmtChange(ch))
				return false
			}
		}
		if i > 0 && c.Seq <= res.Commits[i-1].Seq {
			t.Errorf("%s: commits out of order: %v", what, seqs(res.Commits))
			return false
		}
		if i >= len(remaining) || !sameCommit(c, remaining[i]) {
			var want string
			if i < len(remaining) {
				want = fmtCommit(remaining[i])
			}
			t.Errorf("%s: commit #%d =\n  %s\nwant\n  %s\n(whole answer %v, want a prefix of %v)", what, i, fmtCommit(c), want, seqs(res.Commits), seqs(remaining))
			return false
		}
	}
	k, total := len(res.Commits), changeCount(res.Commits)
	switch {
	case k < len(remaining) && res.Complete:
		t.Errorf("%s: Complete with %d of %d matching commits %v", what, k, len(remaining), seqs(remaining))
	case k < len(remaining) && k == 0:
		t.Errorf("%s: incomplete answer with no commit", what)
	case k < len(remaining) && limit <= 0:
		t.Errorf("%s: %d of %d commits with no limit", what, k, len(remaining))
	case k < len(remaining) && total+len(remaining[k].Changes) <= limit:
		t.Errorf("%s: stopped after %d changes, but commit %d (%d changes) fits the limit", what, total, remaining[k].Seq, len(remaining[k].Changes))
	case k > 1 && limit > 0 && total > limit:
		t.Errorf("%s: %d changes in %d commits exceed the limit", what, total, k)
	case k == len(remaining) && !res.Complete && (limit <= 0 || total < limit):
		t.Errorf("%s: every matching commit returned with room left (%d changes), but not Complete", what, total)
	default:
		return true
	}
	return false
}

// checkScan reads every row of table inside scopes, a page of limit at a
// time, and compares the pages with the model.
func (e *env) checkScan(m *logModel, table string, scopes wire.ScopeMap, limit int) bool {
	t := e.t
	t.Helper()
	what := fmt.Sprintf("scan %s of %s, limit %d", fmtScopeMap(scopes), table, limit)
	want := m.scan(table, scopes)
	if !e.checkBoundaries(what, want, table, scopes, limit) {
		return false
	}
	var after *string
	for page := 0; ; page++ {
		if page > len(want) {
			t.Errorf("%s: no short page after %d pages", what, page)
			return false
		}
		res, err := e.s.ScanRows(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, After: after, Limit: limit})
		if err != nil {
			t.Errorf("%s: ScanRows: %v", what, err)
			return false
		}
		// NoScopes may leave the scopes undecoded, never change the page:
		// the same rows, versions and payloads, and with several keys
		// every row still matches all of them (checked on the first two
		// pages of each scan, which keeps the property test's time).
		bare := res
		if page < 2 {
			if bare, err = e.s.ScanRows(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, After: after, Limit: limit, NoScopes: true}); err != nil {
				t.Errorf("%s: ScanRows with NoScopes: %v", what, err)
				return false
			}
		}
		if len(bare) != len(res) {
			t.Errorf("%s: NoScopes page after %v = %q, want %q", what, deref(after), rowIDs(bare), rowIDs(res))
			return false
		}
		for i, r := range bare {
			if r.RowID != res[i].RowID || r.ServerVersion != res[i].ServerVersion || !bytes.Equal(r.Payload, res[i].Payload) ||
				len(scopes) > 1 && !inScopes(r.Scopes, scopes) {
				t.Errorf("%s: NoScopes row %s, want %s", what, fmtRow(r), fmtRow(res[i]))
				return false
			}
		}
		remaining := rowsAfter(want, after)
		for i, r := range res {
			if r.Table != table || !inScopes(r.Scopes, scopes) {
				t.Errorf("%s: row outside the query: %s", what, fmtRow(r))
				return false
			}
			if i >= len(remaining) || !sameRow(r, remaining[i]) {
				t.Errorf("%s: page after %v =\n  %q\nwant a prefix of\n  %q", what, deref(after), rowIDs(res), rowIDs(remaining))
				return false
			}
		}
		switch {
		case len(res) > limit:
			t.Errorf("%s: page of %d rows", what, len(res))
			return false
		case len(res) < limit && len(res) < len(remaining):
			t.Errorf("%s: short page of %d rows after %v with %d rows left", what, len(res), deref(after), len(remaining))
			return false
		case len(res) < limit:
			return true
		}
		after = &res[len(res)-1].RowID
	}
}

// checkBoundaries compares PageBoundaries with the model's rows inside
// scopes (want, in order): from the start and from a few cursors, with
// room for every page and for fewer pages than there are. Scopes of more
// than one key must be refused.
func (e *env) checkBoundaries(what string, want []store.Row, table string, scopes wire.ScopeMap, limit int) bool {
	t := e.t
	t.Helper()
	if len(scopes) != 1 {
		got, err := e.s.PageBoundaries(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, Limit: limit}, 10)
		if !errors.Is(err, store.ErrBoundariesOneKey) {
			t.Errorf("%s: PageBoundaries of %d keys = %q, %v; want ErrBoundariesOneKey", what, len(scopes), got, err)
			return false
		}
		return true
	}
	afters := []*string{nil}
	for _, i := range []int{0, len(want) / 2, len(want) - 1} {
		if i >= 0 && i < len(want) {
			afters = append(afters, &want[i].RowID)
		}
	}
	afters = append(afters, ptr(""), ptr("\U0010FFFF"))
	for _, after := range afters {
		rest := rowsAfter(want, after)
		if after != nil && *after == "" {
			rest = want
		}
		for _, pages := range []int{1, 2, len(rest)/limit + 1} {
			var exp []string
			for i := limit; i < len(rest) && len(exp) < pages; i += limit {
				exp = append(exp, rest[i-1].RowID)
			}
			got, err := e.s.PageBoundaries(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, After: after, Limit: limit}, pages)
			if err != nil {
				t.Errorf("%s: PageBoundaries after %v, %d pages: %v", what, deref(after), pages, err)
				return false
			}
			if !slices.Equal(got, exp) {
				t.Errorf("%s: PageBoundaries after %v, %d pages = %q, want %q", what, deref(after), pages, got, exp)
				return false
			}
			if w, ok := e.s.(store.BoundaryWalker); ok {
				var walked []string
				err := w.WalkPageBoundaries(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, After: after, Limit: limit}, pages,
					func(id string) { walked = append(walked, id) })
				if err != nil || !slices.Equal(walked, exp) {
					t.Errorf("%s: WalkPageBoundaries after %v, %d pages = %q, %v; want %q", what, deref(after), pages, walked, err, exp)
					return false
				}
			}
		}
	}
	if c, ok := e.s.(store.ScopeRowCounter); ok {
		for _, lim := range []int{1, limit, len(want), len(want) + 1} {
			if lim < 1 {
				continue
			}
			got, err := c.CountScopeRows(e.ctx, "p1", table, scopes[0], lim)
			if err != nil || got != min(len(want), lim) {
				t.Errorf("%s: CountScopeRows(limit %d) = %d, %v; want %d", what, lim, got, err, min(len(want), lim))
				return false
			}
		}
	}
	return true
}

func deref(s *string) string {
	if s == nil {
		return "<start>"
	}
	return fmt.Sprintf("%q", *s)
}
