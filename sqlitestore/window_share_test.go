package sqlitestore

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// TestWindowSharedEqualsAlone: short window reads asked at the same time,
// answered by shared reads of their ranges' union for the union of their
// scope values (window_share.go), get what each read alone gets: the
// commits of its own range with only the changes of its own scopes, cut
// at its own change limit, the same completeness and the state after.
func TestWindowSharedEqualsAlone(t *testing.T) {
	s := openTest(t).(testStore)
	ctx := t.Context()
	sc := storetest.FixtureSchema(t)
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	const p = "p1"
	for _, part := range []string{p, "p2"} {
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
			// A second change in another scope.
			changes = append(changes, storetest.UpsertChange(storetest.Task{ID: fmt.Sprintf("r%dx", i), ProjectID: "b"}.RowWrite(t, 1)))
		}
		if i%7 == 3 {
			changes = append(changes, store.Change{Table: storetest.TableTasks, RowID: "r0", Op: wire.OpDelete, Scopes: w.Scopes})
		}
		through = storetest.AppendCommit(t, s, p, changes...)
		if i%5 == 2 {
			storetest.ApplyUpsert(t, s, "p2", storetest.Task{ID: fmt.Sprintf("q%d", i), ProjectID: project}.RowWrite(t, 1))
		}
	}
	scope := func(values ...string) wire.ScopeMap {
		return wire.ScopeMap{{Key: "project_id", Values: values}}
	}
	type ask struct {
		q    store.CommitWindowQuery
		want store.CommitWindow
	}
	var asks []ask
	for _, sm := range []wire.ScopeMap{scope("a"), scope("b"), scope("a", "c"), scope("zz")} {
		for after := int64(0); after < through; after += 3 {
			for _, n := range []int64{1, 5, 20} {
				for _, limit := range []int{0, 1, 2} {
					q := store.CommitWindowQuery{Table: storetest.TableTasks, Scopes: sm, AfterSeq: after,
						ThroughSeq: min(through, after+n), LimitChanges: limit, StateAfter: true, Running: sc.Version()}
					want, err := s.readCommitWindow(ctx, p, q)
					if err != nil {
						t.Fatal(err)
					}
					asks = append(asks, ask{q, want})
				}
			}
		}
	}
	for round := 0; round < 50 && (round < 3 || s.sharedAnswers.Load() == 0); round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, a := range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got, err := s.ReadCommitWindow(ctx, p, a.q)
				switch {
				case err != nil:
					t.Error(err)
				case got.Complete != a.want.Complete || !sameCommits(got.Commits, a.want.Commits):
					t.Errorf("%+v: got %s (complete %v), alone %s (complete %v)", a.q,
						commitsString(got.Commits), got.Complete, commitsString(a.want.Commits), a.want.Complete)
				case got.State == nil || a.want.State == nil || got.State.Partition != a.want.State.Partition ||
					got.State.Gate.StoredSchemaVersion != a.want.State.Gate.StoredSchemaVersion:
					t.Errorf("%+v: state %v, alone %v", a.q, got.State, a.want.State)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	t.Logf("%d reads, %d answers of shared reads", len(asks), s.sharedAnswers.Load())
	if s.sharedAnswers.Load() == 0 {
		t.Fatal("no read was answered by a shared read")
	}
}

func sameCommits(a, b []store.Commit) bool {
	return slices.EqualFunc(a, b, func(x, y store.Commit) bool {
		return x.Seq == y.Seq && x.CreatedAtMs == y.CreatedAtMs && x.ActorID == y.ActorID && x.ClientID == y.ClientID &&
			x.ClientCommitID == y.ClientCommitID && slices.EqualFunc(x.Changes, y.Changes, func(u, v store.Change) bool {
			return u.Table == v.Table && u.RowID == v.RowID && u.Op == v.Op && u.RowVersion == v.RowVersion &&
				slices.Equal(u.Scopes, v.Scopes) && bytes.Equal(u.Payload, v.Payload) && (u.Payload == nil) == (v.Payload == nil)
		})
	})
}

func commitsString(cs []store.Commit) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "%d:", c.Seq)
		for _, ch := range c.Changes {
			fmt.Fprintf(&b, "%s/%d,", ch.RowID, ch.Op)
		}
		b.WriteByte(' ')
	}
	return b.String()
}
