package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunRequestState tests store.RequestStateReader: one read of what a sync
// request checks at entry agrees with Partition, ReadServeGate and Client
// read one by one, sees the client's deferred cursor, and keeps
// partitions apart. A store without the interface skips the area.
func RunRequestState(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"AgreesWithSeparateReads", testRequestStateAgrees},
		{"UnknownPartition", testRequestStateUnknown},
		{"DeferredCursor", testRequestStateDeferred},
		{"AfterWindow", testRequestStateAfterWindow},
	})
}

// testRequestStateAfterWindow: a commit window asked for the state after
// its rows (CommitWindowQuery.StateAfter) returns the partition and the
// serve gate as read on their own, whether a limit stopped it or not.
func testRequestStateAfterWindow(t *testing.T, open Opener) {
	e := newEnv(t, open)
	requestStateOf(t, e.s)
	e.touch("p1")
	for i := range 3 {
		w := Task{ID: fmt.Sprintf("t%d", i), ProjectID: "p1"}.RowWrite(t, 1)
		AppendCommit(t, e.s, "p1", UpsertChange(w))
	}
	scopes := wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}
	for _, limit := range []int{0, 1} {
		win, err := e.s.ReadCommitWindow(e.ctx, "p1", store.CommitWindowQuery{Table: TableTasks, Scopes: scopes,
			AfterSeq: 0, ThroughSeq: 3, LimitChanges: limit, StateAfter: true, Running: 1})
		if err != nil {
			t.Fatalf("ReadCommitWindow(limit %d): %v", limit, err)
		}
		if win.State == nil {
			t.Fatalf("ReadCommitWindow(limit %d, StateAfter).State = nil; want the state after the rows", limit)
		}
		if want := e.partition("p1"); win.State.Partition != want {
			t.Errorf("ReadCommitWindow(limit %d).State.Partition = %+v; want %+v", limit, win.State.Partition, want)
		}
		if b, ok := e.s.(store.Barrier); ok {
			g, err := b.ReadServeGate(e.ctx, "p1", 1)
			if err != nil || !reflect.DeepEqual(win.State.Gate, g) {
				t.Errorf("ReadCommitWindow(limit %d).State.Gate = %+v; want ReadServeGate's %+v (%v)", limit, win.State.Gate, g, err)
			}
		}
	}
	win, err := e.s.ReadCommitWindow(e.ctx, "p1", store.CommitWindowQuery{Table: TableTasks, Scopes: scopes, AfterSeq: 0, ThroughSeq: 3})
	if err != nil || win.State != nil {
		t.Errorf("ReadCommitWindow without StateAfter: State %v, %v; want nil", win.State, err)
	}
}

func requestStateOf(t *testing.T, s store.Store) store.RequestStateReader {
	t.Helper()
	rs, ok := s.(store.RequestStateReader)
	if !ok {
		t.Skip("the store does not implement store.RequestStateReader")
	}
	return rs
}

func testRequestStateAgrees(t *testing.T, open Opener) {
	e := newEnv(t, open)
	rs := requestStateOf(t, e.s)
	e.touch("p1")
	e.touch("p2")
	const running = 1
	st, err := rs.ReadRequestState(e.ctx, "p1", "c1", running)
	if err != nil {
		t.Fatalf("ReadRequestState(p1, c1): %v", err)
	}
	if st.Client != nil {
		t.Errorf("ReadRequestState(p1, c1).Client = %s before any record; want nil", fmtClient(*st.Client))
	}
	if want := e.partition("p1"); st.Partition != want {
		t.Errorf("ReadRequestState(p1).Partition = %+v; want %+v", st.Partition, want)
	}
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	AppendCommit(t, e.s, "p1", UpsertChange(w))
	AppendCommit(t, e.s, "p1", UpsertChange(w))
	rec := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 2, UpdatedAtMs: 1200,
		Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}}
	e.putClient("p1", rec)
	other := rec
	other.ActorID, other.Cursor = "a2", 0
	e.putClient("p2", other)

	st, err = rs.ReadRequestState(e.ctx, "p1", "c1", running)
	if err != nil {
		t.Fatalf("ReadRequestState(p1, c1): %v", err)
	}
	if want := e.partition("p1"); st.Partition != want || st.Partition.MaxCommitSeq != 2 {
		t.Errorf("ReadRequestState(p1).Partition = %+v; want %+v with MaxCommitSeq 2", st.Partition, want)
	}
	if st.Client == nil || !sameClient(*st.Client, rec) {
		t.Errorf("ReadRequestState(p1, c1).Client = %v; want %s", st.Client, fmtClient(rec))
	}
	if b, ok := e.s.(store.Barrier); ok {
		g, err := b.ReadServeGate(e.ctx, "p1", running)
		if err != nil {
			t.Fatalf("ReadServeGate: %v", err)
		}
		if !reflect.DeepEqual(st.Gate, g) {
			t.Errorf("ReadRequestState(p1).Gate = %+v; want ReadServeGate's %+v", st.Gate, g)
		}
		if st.Gate.LogEpoch != epochOf("p1") {
			t.Errorf("ReadRequestState(p1).Gate.LogEpoch = %q; want %q", st.Gate.LogEpoch, epochOf("p1"))
		}
	}
	st, err = rs.ReadRequestState(e.ctx, "p2", "c1", running)
	if err != nil {
		t.Fatalf("ReadRequestState(p2, c1): %v", err)
	}
	if st.Client == nil || st.Client.ActorID != "a2" || st.Partition.MaxCommitSeq != 0 {
		t.Errorf("ReadRequestState(p2, c1) = client %v, partition %+v; want p2's own record (actor a2) and no commits", st.Client, st.Partition)
	}
	st, err = rs.ReadRequestState(e.ctx, "p1", "c-none", running)
	if err != nil || st.Client != nil {
		t.Errorf("ReadRequestState(p1, c-none) = client %v, %v; want nil, nil", st.Client, err)
	}
}

func testRequestStateUnknown(t *testing.T, open Opener) {
	e := newEnv(t, open)
	rs := requestStateOf(t, e.s)
	e.touch("p1")
	if _, err := rs.ReadRequestState(e.ctx, "nowhere", "c1", 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReadRequestState(unknown partition) = %v; want store.ErrNotFound", err)
	}
}

// testRequestStateDeferred: a cursor whose write is deferred is in the
// state read, as Client returns it.
func testRequestStateDeferred(t *testing.T, open Opener) {
	e := newEnv(t, open)
	rs := requestStateOf(t, e.s)
	d, ok := e.s.(store.ClientDeferrer)
	if !ok {
		t.Skip("the store does not implement store.ClientDeferrer")
	}
	e.touch("p1")
	rec := deferBase("c1")
	e.putClient("p1", rec)
	rec.Cursor, rec.UpdatedAtMs = 9, 1500
	if err := d.DeferClient(e.ctx, "p1", epochOf("p1"), rec, 5); err != nil {
		t.Fatalf("DeferClient: %v", err)
	}
	st, err := rs.ReadRequestState(e.ctx, "p1", "c1", 1)
	if err != nil {
		t.Fatalf("ReadRequestState: %v", err)
	}
	if st.Client == nil || !sameClient(*st.Client, rec) {
		t.Errorf("ReadRequestState(p1, c1).Client = %v; want the deferred %s", st.Client, fmtClient(rec))
	}
}

// BenchmarkRequestEntry measures what a sync request reads at entry: the
// partition, the serve gate and the client record one by one
// ("separate"), and in one ReadRequestState ("combined", skipped on a
// store without it).
func BenchmarkRequestEntry(b *testing.B, open Opener) {
	s := benchPartition(b, open, "p1")
	ctx := b.Context()
	rec := deferBase("c1")
	if err := s.PutClient(ctx, "p1", rec); err != nil {
		b.Fatalf("PutClient: %v", err)
	}
	b.Run("separate", func(b *testing.B) {
		bar, _ := s.(store.Barrier)
		for b.Loop() {
			if _, err := s.Partition(ctx, "p1"); err != nil {
				b.Fatal(err)
			}
			if bar != nil {
				if _, err := bar.ReadServeGate(ctx, "p1", 1); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.Client(ctx, "p1", "c1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("combined", func(b *testing.B) {
		rs, ok := s.(store.RequestStateReader)
		if !ok {
			b.Skip("no store.RequestStateReader")
		}
		for b.Loop() {
			if st, err := rs.ReadRequestState(ctx, "p1", "c1", 1); err != nil || st.Client == nil {
				b.Fatal(st.Client, err)
			}
		}
	})
}
