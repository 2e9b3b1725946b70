package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// TestWindowRangeChunks: windows over more candidates than one range read
// takes (rangeChunk) come out whole, in order and exactly once, for a
// dense scope (read by range, with another scope's commits in between), a
// sparse one (read by probes), and a commit of two changes of which the
// other key keeps one; with no limit, a limit above a chunk and small
// limits, read page after page from each page's last commit.
func TestWindowRangeChunks(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	ctx := context.Background()
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	const p = "p1"
	const commits = 2*rangeChunk + 300
	want := map[string][]int64{}
	changes := map[int64]int{} // the dense scope's changes per commit
	for done := 0; done < commits; done += 250 {
		err := s.Write(ctx, p, func(ctx context.Context, tx store.WriteTx) error {
			for i := done; i < min(done+250, commits); i++ {
				project := "dense"
				switch {
				case i%50 == 7:
					project = "sparse"
				case i%3 == 2:
					project = "other"
				}
				rows := []store.RowWrite{storetest.Task{ID: fmt.Sprintf("r%05d", i), ProjectID: project}.RowWrite(t, 1)}
				n := 1
				if i == rangeChunk+5 {
					// A second change in the dense scope, and one in another.
					rows = append(rows, storetest.Task{ID: fmt.Sprintf("s%05d", i), ProjectID: project}.RowWrite(t, 1),
						storetest.Task{ID: fmt.Sprintf("o%05d", i), ProjectID: "other"}.RowWrite(t, 1))
					n = 2
				}
				var chs []store.Change
				for _, r := range rows {
					if err := tx.UpsertRow(ctx, r); err != nil {
						return err
					}
					chs = append(chs, storetest.UpsertChange(r))
				}
				seq, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: fmt.Sprintf("k%d", i), ActorID: "a",
					CreatedAtMs: int64(1000 + i), Changes: chs})
				if err != nil {
					return err
				}
				want[project] = append(want[project], seq)
				if project == "dense" {
					changes[seq] = n
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	through := want["dense"][len(want["dense"])-1]
	through = max(through, want["sparse"][len(want["sparse"])-1], want["other"][len(want["other"])-1])
	for _, project := range []string{"dense", "sparse"} {
		for _, limit := range []int{0, 1000, rangeChunk + 10, 7, 1} {
			var got []int64
			cursor := int64(0)
			for page := 0; ; page++ {
				if page > commits {
					t.Fatalf("%s, limit %d: no complete page", project, limit)
				}
				w, err := s.ReadCommitWindow(ctx, p, store.CommitWindowQuery{Table: storetest.TableTasks,
					Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: []string{project}}}, AfterSeq: cursor, ThroughSeq: through, LimitChanges: limit})
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, c := range w.Commits {
					got = append(got, c.Seq)
					n += len(c.Changes)
					if c.ActorID != "a" || c.ClientID != "c" || c.CreatedAtMs < 1000 {
						t.Fatalf("%s: commit %d read as %+v", project, c.Seq, c)
					}
					for _, ch := range c.Changes {
						if v, _ := scopeValue(ch.Scopes, storetest.VarProject); v != project || ch.Payload == nil {
							t.Fatalf("%s: commit %d has change %+v", project, c.Seq, ch)
						}
					}
					if project == "dense" && len(c.Changes) != changes[c.Seq] {
						t.Fatalf("commit %d has %d changes, want %d", c.Seq, len(c.Changes), changes[c.Seq])
					}
				}
				if limit > 0 && n > limit && len(w.Commits) > 1 {
					t.Fatalf("%s, limit %d: a page of %d changes", project, limit, n)
				}
				if w.Complete {
					break
				}
				if len(w.Commits) == 0 {
					t.Fatalf("%s, limit %d: an empty incomplete page after %d", project, limit, cursor)
				}
				cursor = w.Commits[len(w.Commits)-1].Seq
			}
			if !slices.Equal(got, want[project]) {
				t.Errorf("%s, limit %d: %d commits read, want %d (first difference at %d)", project, limit, len(got), len(want[project]), firstDiff(got, want[project]))
			}
		}
	}
}

func scopeValue(sc wire.StoredScopes, key string) (string, bool) {
	for _, e := range sc {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestWindowWireOnlyRange: a WireOnly window read by ranges (the pages
// after a catch-up's first) leaves the commits' client ids unread, and
// holds what the window without it holds otherwise.
func TestWindowWireOnlyRange(t *testing.T) {
	t.Parallel()
	s, last := oneScopeLog(t, 30)
	ctx, p := context.Background(), "p1"
	q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: []string{"a"}}},
		AfterSeq: 5, ThroughSeq: last, LimitChanges: 10, Bulk: true}
	full, err := s.ReadCommitWindow(ctx, p, q)
	if err != nil {
		t.Fatal(err)
	}
	q.WireOnly = true
	only, err := s.ReadCommitWindow(ctx, p, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Commits) != 10 || len(only.Commits) != 10 {
		t.Fatalf("%d and %d commits, want 10 each", len(full.Commits), len(only.Commits))
	}
	for i, c := range only.Commits {
		f := full.Commits[i]
		if f.ClientID == "" || f.ClientCommitID == "" || c.ClientID != "" || c.ClientCommitID != "" {
			t.Fatalf("commit %d: client ids %q %q without WireOnly, %q %q with it; want them read only without", f.Seq, f.ClientID, f.ClientCommitID, c.ClientID, c.ClientCommitID)
		}
		if c.Seq != f.Seq || c.CreatedAtMs != f.CreatedAtMs || c.ActorID != f.ActorID || len(c.Changes) != 1 || c.Changes[0].RowID != f.Changes[0].RowID {
			t.Fatalf("commit %+v with WireOnly, %+v without", c, f)
		}
	}
}

// TestWindowBulkOnScanConnections: a bulk window (a catch-up's read-ahead)
// reads on the scan connections (a small page cache); other windows on
// the read connections. With every scan connection held, a bulk window waits
// (until its context ends) while a window that is not bulk is read, and
// once they are given back the bulk window is read and equals the other.
func TestWindowBulkOnScanConnections(t *testing.T) {
	t.Parallel()
	s, last := oneScopeLog(t, 20)
	ctx, p := context.Background(), "p1"
	q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: wire.ScopeMap{{Key: storetest.VarProject, Values: []string{"a"}}},
		AfterSeq: 0, ThroughSeq: last, LimitChanges: 8}
	var held []*conn
	release := func() {
		for _, c := range held {
			s.scanners.put(c)
		}
		held = nil
	}
	t.Cleanup(release) // before the store's Close, which waits for them
	for range s.scanners.n {
		c, err := s.scanners.take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	plain, err := s.ReadCommitWindow(ctx, p, q)
	if err != nil {
		t.Fatalf("a window that is not bulk, every scan connection held: %v", err)
	}
	bq := q
	bq.Bulk = true
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = s.ReadCommitWindow(short, p, bq)
	cancel()
	if err == nil {
		t.Fatal("a bulk window was read with every scan connection held: not on a scan connection")
	}
	release()
	bulk, err := s.ReadCommitWindow(ctx, p, bq)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Commits) != 8 || len(bulk.Commits) != 8 {
		t.Fatalf("%d and %d commits, want 8 each", len(plain.Commits), len(bulk.Commits))
	}
	for i, c := range bulk.Commits {
		if c.Seq != plain.Commits[i].Seq || c.Changes[0].RowID != plain.Commits[i].Changes[0].RowID {
			t.Fatalf("bulk commit %d: %+v, not bulk %+v", i, c, plain.Commits[i])
		}
	}
}

// oneScopeLog opens a store whose partition p1 holds n commits, each one
// upsert of a task of project "a"; it returns the last commit's seq.
func oneScopeLog(t *testing.T, n int) (testStore, int64) {
	t.Helper()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(context.Background(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range n {
		r := storetest.Task{ID: fmt.Sprintf("r%02d", i), ProjectID: "a"}.RowWrite(t, 1)
		last = storetest.AppendCommit(t, s, "p1", storetest.UpsertChange(r))
	}
	return s, last
}
