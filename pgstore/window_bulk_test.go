package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// bulkLog writes the log of the bulk window tests: 80 commits of two
// changes each (owners "o" and "x"), project "a" on most of the first 40
// (every fifth "b") and on every tenth of the last 40 (the others "z");
// commit 13's changes are both owner "x", and commit 7's commit row is
// deleted (pruned under the window). It returns the sequence of each.
func bulkLog(t *testing.T, s *Store, p string) []int64 {
	t.Helper()
	c := testSchema(t, 1)
	ensure(t, s, c)
	seqs := make([]int64, 80)
	for i := range seqs {
		project := "a"
		switch {
		case i < 40 && i%5 == 4:
			project = "b"
		case i >= 40 && i%10 != 0:
			project = "z"
		}
		owner := "o"
		if i == 13 {
			owner = "x"
		}
		id := fmt.Sprintf("r%d", i)
		seqs[i] = apply(t, s, p, task{id: id, project: project, owner: owner}.write(t, c, 1),
			task{id: id + "x", project: project, owner: "x"}.write(t, c, 1))
	}
	if _, err := s.pool.Exec(context.Background(), `DELETE FROM sync_commits WHERE partition = $1 AND commit_seq = $2`, p, seqs[7]); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// windowSeqs reads the windows of q from AfterSeq to ThroughSeq, each
// from where the last ended, and returns every window's commit sequences,
// change counts and completeness, and all commits' sequences in order.
func windowSeqs(t *testing.T, s *Store, p string, q store.CommitWindowQuery) (windows []string, all []int64) {
	t.Helper()
	for range 200 {
		w, err := s.ReadCommitWindow(context.Background(), p, q)
		if err != nil {
			t.Fatal(err)
		}
		desc := fmt.Sprintf("complete=%v", w.Complete)
		changes := 0
		for _, cm := range w.Commits {
			desc += fmt.Sprintf(" %d/%d/%s/%s", cm.Seq, len(cm.Changes), cm.ActorID, cm.ClientID)
			changes += len(cm.Changes)
			all = append(all, cm.Seq)
			for _, ch := range cm.Changes {
				if !store.MatchScopes(ch.Scopes, q.Scopes) {
					t.Errorf("commit %d: change %s of scopes %v outside %v", cm.Seq, ch.RowID, ch.Scopes, q.Scopes)
				}
				if ch.Table != "tasks" || len(ch.Payload) == 0 {
					t.Errorf("commit %d: change %+v", cm.Seq, ch)
				}
			}
		}
		if q.LimitChanges > 0 && len(w.Commits) > 1 && changes > q.LimitChanges {
			t.Errorf("%d changes in a window of limit %d", changes, q.LimitChanges)
		}
		windows = append(windows, desc)
		if w.Complete {
			return windows, all
		}
		if len(w.Commits) == 0 {
			t.Fatalf("an incomplete empty window after %d", q.AfterSeq)
		}
		q.AfterSeq = w.Commits[len(w.Commits)-1].Seq
	}
	t.Fatal("the windows did not end")
	return nil, nil
}

// TestWindowBulkRanges: a bulk window (read by ranges of the log without
// the candidate walk while they stay dense) answers exactly what the same
// window read by candidates answers, window by window, for scopes dense
// and sparse in the log, with two keys (a commit whose changes match the
// first key only is not in the window), over a pruned commit, at several
// change limits; and the commits are the ones the log says.
func TestWindowBulkRanges(t *testing.T) {
	s := openStore(t)
	s.shortWindow = 0 // the paged reads, however short the log
	const p = "p1"
	seqs := bulkLog(t, s, p)
	through := seqs[len(seqs)-1]
	want := func(projects []string, owner string) []int64 {
		var out []int64
		for i, seq := range seqs {
			project := "a"
			switch {
			case i < 40 && i%5 == 4:
				project = "b"
			case i >= 40 && i%10 != 0:
				project = "z"
			}
			if i == 7 || !slices.Contains(projects, project) || (owner == "o" && i == 13) {
				continue
			}
			out = append(out, seq)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		scopes   wire.ScopeMap
		projects []string
		owner    string
	}{
		{"a", scope("project_id", "a"), []string{"a"}, ""},
		{"b", scope("project_id", "b"), []string{"b"}, ""},
		{"a,b", scope("project_id", "a", "b"), []string{"a", "b"}, ""},
		{"a owner o", wire.ScopeMap{{Key: "owner_id", Values: []string{"o"}}, {Key: "project_id", Values: []string{"a"}}}, []string{"a"}, "o"},
	} {
		for _, limit := range []int{0, 1, 2, 5, 9} {
			for _, after := range []int64{0, seqs[3], seqs[38], seqs[40]} {
				q := store.CommitWindowQuery{Table: "tasks", Scopes: tc.scopes, AfterSeq: after, ThroughSeq: through, LimitChanges: limit}
				byCands, all := windowSeqs(t, s, p, q)
				q.Bulk = true
				byRange, allBulk := windowSeqs(t, s, p, q)
				if !slices.Equal(byCands, byRange) {
					t.Errorf("%s limit %d after %d: windows by candidates\n%q\nbulk\n%q", tc.name, limit, after, byCands, byRange)
				}
				exp := slices.DeleteFunc(want(tc.projects, tc.owner), func(seq int64) bool { return seq <= after })
				if !slices.Equal(all, exp) || !slices.Equal(allBulk, exp) {
					t.Errorf("%s limit %d after %d: commits %v, bulk %v, want %v", tc.name, limit, after, all, allBulk, exp)
				}
			}
		}
	}
}

// TestWindowBulkSkipsWalk: a bulk window over a dense scope is read from
// the log's ranges, not from the change scope index (without the index's
// entries it still finds the commits, which the candidate walk cannot),
// and a sparse stretch sends it back to the candidate walk instead of
// reading range after range (a commit past the switch without index
// entries is then not found, as by candidates). White-box: it fails if
// the bulk read walks the candidates, or never stops reading ranges.
func TestWindowBulkSkipsWalk(t *testing.T) {
	s := openStore(t)
	s.shortWindow = 0
	ctx := context.Background()
	const p = "p1"
	seqs := bulkLog(t, s, p)
	through := seqs[len(seqs)-1]
	// Commits 20 and 70 ("a") lose their index entries.
	for _, i := range []int{20, 70} {
		if _, err := s.pool.Exec(ctx, `DELETE FROM sync_change_scopes WHERE partition = $1 AND commit_seq = $2`, p, seqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	read := func(after int64, limit int, bulk bool) []int64 {
		w, err := s.ReadCommitWindow(ctx, p, store.CommitWindowQuery{Table: "tasks", Scopes: scope("project_id", "a"),
			AfterSeq: after, ThroughSeq: through, LimitChanges: limit, Bulk: bulk})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, cm := range w.Commits {
			out = append(out, cm.Seq)
		}
		return out
	}
	if through-seqs[0] != int64(len(seqs)-1) {
		t.Fatalf("the log's sequences are not consecutive: %v", seqs)
	}
	// Dense, limit 14 (a page of 15 sequences, two changes a commit): the
	// window is commits 16, 17, 18, 20, 21, 22, 23 (19 is "b"); by
	// candidates 20 is not found and 25 comes instead.
	if got := read(seqs[15], 14, true); !slices.Equal(got, []int64{seqs[16], seqs[17], seqs[18], seqs[20], seqs[21], seqs[22], seqs[23]}) {
		t.Errorf("bulk window after %d: %v, want 16-23 with 20: read by candidates?", seqs[15], got)
	}
	if got := read(seqs[15], 14, false); !slices.Equal(got, []int64{seqs[16], seqs[17], seqs[18], seqs[21], seqs[22], seqs[23], seqs[25]}) {
		t.Errorf("window by candidates after %d: %v (the index has no entries for %d)", seqs[15], got, seqs[20])
	}
	// Sparse, limit 5 (a page of 6): after commit 50, the first range
	// (51-56) holds no "a" commit; the rest goes by candidates, which
	// find 60 but not 70 (read by ranges, 70 would be in the window).
	if got := read(seqs[50], 5, true); !slices.Equal(got, []int64{seqs[60]}) {
		t.Errorf("bulk window after %d (sparse): %v, want commit %d alone", seqs[50], got, seqs[60])
	}
}

// describe is a deep description of a window's commits: sequences,
// commit fields, every change's fields and payload bytes.
func describe(w store.CommitWindow) string {
	out := fmt.Sprintf("complete=%v", w.Complete)
	for _, cm := range w.Commits {
		out += fmt.Sprintf(" [%d %d %s %s %s", cm.Seq, cm.CreatedAtMs, cm.ActorID, cm.ClientID, cm.ClientCommitID)
		for _, ch := range cm.Changes {
			out += fmt.Sprintf(" (%s %s %d %d %v %x)", ch.Table, ch.RowID, ch.Op, ch.RowVersion, ch.Scopes, ch.Payload)
		}
		out += "]"
	}
	return out
}

// TestWindowRelease: a paged window's memory, released, serves the next
// windows (the commits' backing array comes back), which read the same as
// windows never released; a second Release of one window does nothing
// (two windows held at once after it are both whole: had the memory gone
// back twice, the second read would overwrite the first).
func TestWindowRelease(t *testing.T) {
	s := openStore(t)
	s.shortWindow = 0
	ctx := context.Background()
	const p = "p1"
	seqs := bulkLog(t, s, p)
	through := seqs[len(seqs)-1]
	read := func(after int64, project string, bulk bool) store.CommitWindow {
		t.Helper()
		w, err := s.ReadCommitWindow(ctx, p, store.CommitWindowQuery{Table: "tasks", Scopes: scope("project_id", project),
			AfterSeq: after, ThroughSeq: through, LimitChanges: 5, Bulk: bulk})
		if err != nil {
			t.Fatal(err)
		}
		if w.Release == nil {
			t.Fatal("a paged window without Release")
		}
		return w
	}
	// The windows of "a" from the start, never released.
	var want []string
	var afters []int64
	for after := int64(0); ; {
		w := read(after, "a", false)
		want, afters = append(want, describe(w)), append(afters, after)
		if w.Complete {
			break
		}
		after = w.Commits[len(w.Commits)-1].Seq
	}
	reused := 0
	var prev *store.Commit
	for i, after := range afters {
		w := read(after, "a", i%2 == 1)
		if got := describe(w); got != want[i] {
			t.Errorf("window %d after releases:\n%s\nwant\n%s", i, got, want[i])
		}
		if len(w.Commits) > 0 {
			if &w.Commits[0] == prev {
				reused++
			}
			prev = &w.Commits[0]
		}
		w.Release()
	}
	// sync.Pool may drop what is put back (the race detector makes it
	// drop a quarter), but not every time.
	if len(afters) < 6 || reused == 0 {
		t.Errorf("%d windows, %d reused the last one's memory", len(afters), reused)
	}

	w := read(0, "a", false)
	w.Release()
	w.Release()
	wa, wb := read(0, "a", false), read(afters[2], "a", true)
	if da, db := describe(wa), describe(wb); da != want[0] || db != want[2] {
		t.Errorf("two windows held after a double release:\n%s\nwant\n%s\nand\n%s\nwant\n%s", da, want[0], db, want[2])
	}
}
