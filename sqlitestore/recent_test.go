package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// openFixture opens a store with the fixture schema ensured.
func openFixture(t *testing.T) (testStore, *schema.Compiled) {
	t.Helper()
	s := openTest(t).(testStore)
	sc := storetest.FixtureSchema(t)
	if err := s.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	return s, sc
}

// openOther opens another store on s's file, as another process would,
// with the fixture schema ensured.
func openOther(t *testing.T, s testStore) testStore {
	t.Helper()
	other := openPath(t, s.path)
	if err := other.EnsureSchema(t.Context(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	return other
}

// sameAsLog reads q of p1 through ReadCommitWindow and from the log alone
// and fails the test (naming the case at) unless both answer the same;
// it returns the window and whether the recent commits answered it.
func sameAsLog(t *testing.T, s testStore, q store.CommitWindowQuery, at string) (store.CommitWindow, bool) {
	t.Helper()
	before := s.recentAnswers.Load()
	got, err := s.ReadCommitWindow(t.Context(), "p1", q)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.readCommitWindow(t.Context(), "p1", q)
	if err != nil {
		t.Fatal(err)
	}
	if got.Complete != want.Complete || !storetest.SameCommits(got.Commits, want.Commits) {
		t.Fatalf("%s %+v: got %s(complete %v), log %s(complete %v)", at, q,
			storetest.CommitsString(got.Commits), got.Complete, storetest.CommitsString(want.Commits), want.Complete)
	}
	return got, s.recentAnswers.Load() != before
}

// mixedLog writes partition p1's log for the window tests: 30
// commits over three projects, some with a second change in another
// scope, some with a delete, commits of p2 in between. It returns the
// head of p1.
func mixedLog(t *testing.T, s store.Store) int64 {
	t.Helper()
	ctx := t.Context()
	for _, part := range []string{"p1", "p2"} {
		if _, err := s.TouchPartition(ctx, part, 1000, "epoch-"+part); err != nil {
			t.Fatal(err)
		}
	}
	var through int64
	for i := range 30 {
		project := []string{"a", "b", "c"}[i%3]
		w := storetest.Task{ID: fmt.Sprintf("r%d", i), ProjectID: project}.RowWrite(t, 1)
		changes := []store.Change{storetest.UpsertChange(w)}
		if i%4 == 1 {
			changes = append(changes, storetest.UpsertChange(storetest.Task{ID: fmt.Sprintf("r%dx", i), ProjectID: "b"}.RowWrite(t, 1)))
		}
		if i%7 == 3 {
			changes = append(changes, store.Change{Table: storetest.TableTasks, RowID: "r0", Op: wire.OpDelete, Scopes: w.Scopes})
		}
		through = storetest.AppendCommit(t, s, "p1", changes...)
		if i%5 == 2 {
			storetest.ApplyUpsert(t, s, "p2", storetest.Task{ID: fmt.Sprintf("q%d", i), ProjectID: project}.RowWrite(t, 1))
		}
	}
	return through
}

func projects(values ...string) wire.ScopeMap {
	return wire.ScopeMap{{Key: "project_id", Values: values}}
}

// TestRecentWindowsEqualLog: short windows answered from the writer's
// recent commits (recent.go) are what a read of the log answers, field
// for field (client ids too, without WireOnly), cut at each query's scopes
// and change limit, with the state after; none is read from the log.
func TestRecentWindowsEqualLog(t *testing.T) {
	s, sc := openFixture(t)
	ctx := t.Context()
	through := mixedLog(t, s)
	asks := storetest.WindowAsks(t, storetest.TableTasks, []wire.ScopeMap{projects("a"), projects("b"), projects("a", "c"), projects("zz")}, through, 1, sc.Version(),
		func(q store.CommitWindowQuery) (store.CommitWindow, error) { return s.readCommitWindow(ctx, "p1", q) })
	for _, a := range asks {
		got, err := s.ReadCommitWindow(ctx, "p1", a.Q)
		if err != nil {
			t.Fatal(err)
		}
		if got.Complete != a.Want.Complete || !storetest.SameCommits(got.Commits, a.Want.Commits) {
			t.Errorf("%+v: got %s(complete %v), log %s(complete %v)", a.Q, storetest.CommitsString(got.Commits), got.Complete,
				storetest.CommitsString(a.Want.Commits), a.Want.Complete)
		}
		if got.State == nil || a.Want.State == nil || !reflect.DeepEqual(*got.State, *a.Want.State) {
			t.Errorf("%+v: state %+v, log %+v", a.Q, got.State, a.Want.State)
		}
	}
	// A pull's sections, read together (ReadCommitWindows).
	for i := 0; i+4 <= len(asks); i += 4 {
		var qs []store.CommitWindowQuery
		for _, a := range asks[i : i+4] {
			qs = append(qs, a.Q)
		}
		got, err := s.ReadCommitWindows(ctx, "p1", qs)
		if err != nil {
			t.Fatal(err)
		}
		for j, a := range asks[i : i+4] {
			if got[j].Complete != a.Want.Complete || !storetest.SameCommits(got[j].Commits, a.Want.Commits) ||
				got[j].State == nil || !reflect.DeepEqual(*got[j].State, *a.Want.State) {
				t.Errorf("%+v, read together: got %s(complete %v), log %s(complete %v)", a.Q, storetest.CommitsString(got[j].Commits), got[j].Complete,
					storetest.CommitsString(a.Want.Commits), a.Want.Complete)
			}
		}
	}
	if n, want := s.recentAnswers.Load(), int64(len(asks)+len(asks)/4*4); n != want {
		t.Errorf("%d of %d windows answered from the recent commits", n, want)
	}
	if n := s.sharedAnswers.Load(); n != 0 {
		t.Errorf("%d windows read from the log", n)
	}
}

// TestRecentWindowsRolledBack: a commit appended by a write that failed,
// or inside a candidate that was rolled back, is not kept: its sequence is
// taken again by the next commit, and the windows over it answer what the
// log holds.
func TestRecentWindowsRolledBack(t *testing.T) {
	s, _ := openFixture(t)
	ctx := t.Context()
	through := mixedLog(t, s)
	fail := errors.New("refused")
	change := func(id string) store.Change {
		return storetest.UpsertChange(storetest.Task{ID: id, ProjectID: "a"}.RowWrite(t, 1))
	}
	err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "gone", Changes: []store.Change{change("gone")}}); err != nil {
			return err
		}
		return fail
	})
	if !errors.Is(err, fail) {
		t.Fatal(err)
	}
	err = s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		err := tx.Candidate(ctx, func(ctx context.Context) error {
			if _, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "gone too", Changes: []store.Change{change("gone2")}}); err != nil {
				return err
			}
			return fail
		})
		if !errors.Is(err, fail) {
			return fmt.Errorf("candidate: %v", err)
		}
		_, err = tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "kept", Changes: []store.Change{change("kept")}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: projects("a"), AfterSeq: through - 2, ThroughSeq: through + 1}
	want, err := s.readCommitWindow(ctx, "p1", q)
	if err != nil {
		t.Fatal(err)
	}
	before := s.recentAnswers.Load()
	got, err := s.ReadCommitWindow(ctx, "p1", q)
	if err != nil {
		t.Fatal(err)
	}
	if s.recentAnswers.Load() == before {
		t.Fatal("the window was read from the log")
	}
	last := want.Commits[len(want.Commits)-1]
	if last.Seq != through+1 || last.ClientCommitID != "kept" || len(last.Changes) != 1 || last.Changes[0].RowID != "kept" {
		t.Fatalf("the log's last commit: %+v", last)
	}
	if !storetest.SameCommits(got.Commits, want.Commits) || got.Complete != want.Complete {
		t.Fatalf("recent %s, log %s", storetest.CommitsString(got.Commits), storetest.CommitsString(want.Commits))
	}
}

// TestRecentWindowsOtherWriter: a commit of another process on the same
// file is a gap in the recent commits (the window over it reads the log),
// and a change another process made to commits already kept (a payload
// rewritten) empties them at this process's next write.
func TestRecentWindowsOtherWriter(t *testing.T) {
	s, _ := openFixture(t)
	ctx := t.Context()
	through := mixedLog(t, s)
	other := openOther(t, s)
	a := projects("a", "b", "c")
	theirs := storetest.AppendCommit(t, other, "p1", storetest.UpsertChange(storetest.Task{ID: "theirs", ProjectID: "a"}.RowWrite(t, 1)))
	if theirs != through+1 {
		t.Fatalf("the other process's commit is %d, want %d", theirs, through+1)
	}
	read := func(q store.CommitWindowQuery) (store.CommitWindow, bool) {
		t.Helper()
		return sameAsLog(t, s, q, "")
	}
	if _, recent := read(store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: a, AfterSeq: through - 3, ThroughSeq: theirs}); recent {
		t.Error("a window over another process's commit was answered from the recent commits")
	}
	if _, recent := read(store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: a, AfterSeq: through - 3, ThroughSeq: through}); !recent {
		t.Error("a window of this process's commits was read from the log")
	}
	// The other process rewrites a kept commit's payload.
	if err := other.ExecRaw(ctx, fmt.Sprintf(`UPDATE sync_changes SET payload = X'00' WHERE partition='p1' AND commit_seq=%d`, through)); err != nil {
		t.Fatal(err)
	}
	mine := storetest.AppendCommit(t, s, "p1", storetest.UpsertChange(storetest.Task{ID: "mine", ProjectID: "a"}.RowWrite(t, 1)))
	got, _ := read(store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: a, AfterSeq: through - 1, ThroughSeq: through})
	if len(got.Commits) == 0 || got.Commits[0].Seq != through || string(got.Commits[0].Changes[0].Payload) != "\x00" {
		t.Fatalf("the rewritten commit: %s", storetest.CommitsString(got.Commits))
	}
	if _, recent := read(store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: a, AfterSeq: theirs, ThroughSeq: mine}); !recent {
		t.Error("a window of this process's commit after the other's was read from the log")
	}
}

// TestRecentCommitsBounded: the ring keeps at most its capacity and its
// byte budget, dropping the oldest, and never a commit larger than an
// eighth of the budget (a gap: the windows over it read the log).
func TestRecentCommitsBounded(t *testing.T) {
	rc := newRecentCommits(4, 1000)
	commit := func(seq int64, payload int) recentCommit {
		return recentCommit{partition: "p", c: store.Commit{Seq: seq, Changes: []store.Change{{Table: "t", RowID: "r", Op: wire.OpUpsert,
			Scopes: wire.StoredScopes{{Key: "k", Value: "v"}}, Payload: make([]byte, payload)}}}, size: payload}
	}
	q := func(after, through int64) store.CommitWindowQuery {
		return store.CommitWindowQuery{Table: "t", Scopes: wire.ScopeMap{{Key: "k", Values: []string{"v"}}}, AfterSeq: after, ThroughSeq: through}
	}
	rc.publish([]recentCommit{commit(1, 10), commit(2, 10), commit(3, 10), commit(4, 10), commit(5, 10)}, false)
	if _, ok := rc.window("p", q(0, 5)); ok {
		t.Error("commit 1 is kept past the capacity")
	}
	if w, ok := rc.window("p", q(1, 5)); !ok || len(w.Commits) != 4 {
		t.Errorf("commits 2-5: %v %d", ok, len(w.Commits))
	}
	if _, ok := rc.window("q", q(1, 5)); ok {
		t.Error("another partition's window answered")
	}
	rc.publish([]recentCommit{commit(6, 200)}, false) // more than 1000/8
	if _, ok := rc.window("p", q(4, 6)); ok {
		t.Error("a window over a commit too large to keep answered")
	}
	rc.publish([]recentCommit{commit(7, 120), commit(8, 120), commit(9, 120), commit(10, 120)}, false)
	if rc.bytes > 1000 || rc.n != 4 {
		t.Errorf("%d commits, %d bytes", rc.n, rc.bytes)
	}
	rc.publish([]recentCommit{commit(11, 120)}, true)
	if _, ok := rc.window("p", q(9, 10)); ok || rc.n != 1 {
		t.Errorf("the ring was not emptied: %d commits", rc.n)
	}
	if w, ok := rc.window("p", q(10, 11)); !ok || len(w.Commits) != 1 {
		t.Error("the commit published after emptying is not answered")
	}
}

// TestRecentWindowsRandomized: after every step of a random history —
// commits of this process in two partitions, writes that fail, candidates
// rolled back, commits and payload rewrites of another process on the
// file (each followed by a commit of this one, which sees them), prunes —
// every short window of p1 through its head answers what the log holds.
func TestRecentWindowsRandomized(t *testing.T) {
	s, _ := openFixture(t)
	ctx := t.Context()
	other := openOther(t, s)
	for _, part := range []string{"p1", "p2"} {
		if _, err := s.TouchPartition(ctx, part, 1000, "epoch-"+part); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(21, 4))
	id := 0
	changes := func() []store.Change {
		var out []store.Change
		for range 1 + rng.IntN(3) {
			id++
			project := []string{"a", "b", "c"}[rng.IntN(3)]
			out = append(out, storetest.UpsertChange(storetest.Task{ID: fmt.Sprintf("r%d", id), ProjectID: project}.RowWrite(t, 1)))
		}
		return out
	}
	head := func() int64 {
		p, err := s.Partition(ctx, "p1")
		if err != nil {
			t.Fatal(err)
		}
		return p.MaxCommitSeq
	}
	fail := errors.New("refused")
	for step := range 150 {
		switch k := rng.IntN(10); {
		case k < 4:
			storetest.AppendCommit(t, s, []string{"p1", "p1", "p2"}[rng.IntN(3)], changes()...)
		case k == 4:
			err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
				if _, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "failed", Changes: changes()}); err != nil {
					return err
				}
				return fail
			})
			if !errors.Is(err, fail) {
				t.Fatal(err)
			}
		case k == 5:
			err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
				_ = tx.Candidate(ctx, func(ctx context.Context) error {
					if _, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "rolled back", Changes: changes()}); err != nil {
						return err
					}
					return fail
				})
				_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "c", ClientCommitID: "kept", Changes: changes()})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		case k == 6:
			storetest.AppendCommit(t, other, "p1", changes()...)
			storetest.AppendCommit(t, s, "p1", changes()...)
		case k == 7:
			if h := head(); h > 0 {
				seq := 1 + rng.Int64N(h)
				if err := other.ExecRaw(ctx, fmt.Sprintf(`UPDATE sync_changes SET payload = X'%02x' WHERE partition='p1' AND commit_seq=%d`, step, seq)); err != nil {
					t.Fatal(err)
				}
				storetest.AppendCommit(t, s, "p1", changes()...)
			}
		case k == 8:
			if h := head(); h > 40 && rng.IntN(3) == 0 {
				if _, err := s.PruneThrough(ctx, "p1", "epoch-p1", h-30); err != nil {
					t.Fatal(err)
				}
			}
		default:
			storetest.AppendCommit(t, s, "p1", changes()...)
		}
		h := head()
		for after := max(0, h-40); after < h; after++ {
			for _, scopes := range []wire.ScopeMap{projects("a"), projects("b", "c")} {
				q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: scopes, AfterSeq: after, ThroughSeq: h, LimitChanges: rng.IntN(4)}
				sameAsLog(t, s, q, fmt.Sprintf("step %d", step))
			}
		}
	}
	if s.recentAnswers.Load() == 0 {
		t.Fatal("no window was answered from the recent commits")
	}
	t.Logf("%d windows from the recent commits", s.recentAnswers.Load())
}

// TestRecentWindowsPruned: a prune empties the recent commits: a window
// that starts below the new horizon gets what the log still holds, not
// the pruned commits.
func TestRecentWindowsPruned(t *testing.T) {
	s, _ := openFixture(t)
	ctx := t.Context()
	through := mixedLog(t, s)
	if _, err := s.PruneThrough(ctx, "p1", "epoch-p1", through-10); err != nil {
		t.Fatal(err)
	}
	q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: projects("a", "b", "c"), AfterSeq: through - 20, ThroughSeq: through}
	got, err := s.ReadCommitWindow(ctx, "p1", q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Commits) == 0 || got.Commits[0].Seq <= through-10 {
		t.Fatalf("a window over pruned commits: %s", storetest.CommitsString(got.Commits))
	}
	mine := storetest.AppendCommit(t, s, "p1", storetest.UpsertChange(storetest.Task{ID: "after", ProjectID: "a"}.RowWrite(t, 1)))
	before := s.recentAnswers.Load()
	if _, err := s.ReadCommitWindow(ctx, "p1", store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: projects("a"), AfterSeq: mine - 1, ThroughSeq: mine}); err != nil {
		t.Fatal(err)
	}
	if s.recentAnswers.Load() == before {
		t.Error("a commit after the prune is not kept")
	}
}

// BenchmarkRecentWindow: a push+pull round's window cut from the recent
// commits: the last 64 commits of 64 clients, one project each, asked
// for one project's.
func BenchmarkRecentWindow(b *testing.B) {
	rc := newRecentCommits(1024, 1<<20)
	var batch []recentCommit
	for seq := int64(1); seq <= 1024; seq++ {
		sc := wire.StoredScopes{{Key: "project_id", Value: fmt.Sprintf("p%d", seq%64)}}
		nc := store.NewCommit{ClientID: fmt.Sprintf("c%d", seq%64), ClientCommitID: fmt.Sprint(seq), ActorID: "a",
			Changes: []store.Change{{Table: storetest.TableTasks, RowID: fmt.Sprint(seq), Op: wire.OpUpsert, RowVersion: 1,
				Scopes: sc, Payload: []byte("0123456789abcdef0123456789abcdef")}}}
		c, err := keptCommit("p1", seq, nc, [][]byte{store.EncodeScopes(sc)})
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, c)
	}
	rc.publish(batch, false)
	q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: projects("p3"), AfterSeq: 1024 - 64, ThroughSeq: 1024}
	b.ReportAllocs()
	for b.Loop() {
		win, ok := rc.window("p1", q)
		if !ok || len(win.Commits) != 1 {
			b.Fatalf("window: %v, %d commits", ok, len(win.Commits))
		}
	}
}

// TestKeptCommitScopes: a kept commit's scopes are what the log's read
// of the JSON the append wrote gives, whether copied (canonical order,
// valid UTF-8) or decoded (any other).
func TestKeptCommitScopes(t *testing.T) {
	for _, sc := range []wire.StoredScopes{
		nil, {},
		{{Key: "project_id", Value: "p1"}},
		{{Key: "a", Value: "1"}, {Key: "b", Value: "<&>\"\\\n"}},
		{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}},
		{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}},
		{{Key: "é", Value: "\xff"}},
		{{Key: "\xfe", Value: "x"}},
	} {
		enc := store.EncodeScopes(sc)
		want, err := store.DecodeScopes(enc)
		if err != nil {
			t.Fatal(err)
		}
		nc := store.NewCommit{ClientID: "c", ClientCommitID: "cc", Changes: []store.Change{
			{Table: storetest.TableTasks, RowID: "r", Op: wire.OpUpsert, RowVersion: 1, Scopes: sc, Payload: []byte("x")}}}
		kept, err := keptCommit("p1", 1, nc, [][]byte{enc})
		if err != nil {
			t.Fatal(err)
		}
		if got := kept.c.Changes[0].Scopes; !reflect.DeepEqual(got, want) {
			t.Errorf("scopes %q: kept %q, the log reads %q", sc, got, want)
		}
	}
}

// TestKeptCommitSize: a kept commit counts each byte it holds once,
// whichever way its scopes were copied: scopes copied into the arena add
// no more than their entries, decoded ones their strings as well.
func TestKeptCommitSize(t *testing.T) {
	kept := func(sc wire.StoredScopes) recentCommit {
		t.Helper()
		nc := store.NewCommit{ClientID: "c", ClientCommitID: "cc", Changes: []store.Change{
			{Table: storetest.TableTasks, RowID: "r", Op: wire.OpUpsert, RowVersion: 1, Scopes: sc, Payload: []byte("x")}}}
		k, err := keptCommit("p1", 1, nc, [][]byte{store.EncodeScopes(sc)})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	none := kept(nil)
	asIs := kept(wire.StoredScopes{{Key: "a", Value: "1234"}, {Key: "b", Value: "5678"}})
	decoded := kept(wire.StoredScopes{{Key: "b", Value: "5678"}, {Key: "a", Value: "1234"}}) // unsorted: decoded
	// 10 bytes of strings in the arena, two entries of 32.
	if got, want := asIs.size-none.size, 10+2*32; got != want {
		t.Errorf("copied scopes add %d bytes, want %d", got, want)
	}
	// The same 10 bytes reserved in the arena, and decoded again.
	if got, want := decoded.size-none.size, 2*10+2*32; got != want {
		t.Errorf("decoded scopes add %d bytes, want %d", got, want)
	}
}
