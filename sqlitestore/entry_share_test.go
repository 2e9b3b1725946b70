package sqlitestore

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// TestRequestStateShared: concurrent request state reads of one partition,
// answered by shared reads (entry_share.go), get what each read alone
// gets (storetest.CheckSharedEntries).
func TestRequestStateShared(t *testing.T) {
	s, sc := openFixture(t)
	storetest.CheckSharedEntries(t, s, sc.Version(), func(ctx context.Context, p, id string) (store.RequestState, error) {
		return s.readRequestState(ctx, p, id, sc.Version())
	}, s.sharedEntries.Load)
}

// TestStateAfterSharedWithEntries: the states read after windows answered
// from the recent commits (asks without a client) share the entries'
// reads, and get the partition and gate with no client record, while the
// entries asked with them get their own records.
func TestStateAfterSharedWithEntries(t *testing.T) {
	s, sc := openFixture(t)
	ctx := t.Context()
	if _, err := s.TouchPartition(ctx, "p1", 1000, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	storetest.ApplyUpsert(t, s, "p1", storetest.Task{ID: "t1", ProjectID: "a"}.RowWrite(t, 1))
	rec := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 1, UpdatedAtMs: 5000}
	if err := s.PutClient(ctx, "p1", rec); err != nil {
		t.Fatal(err)
	}
	want, err := s.readRequestState(ctx, "p1", "c1", sc.Version())
	if err != nil || want.Client == nil {
		t.Fatalf("alone: %+v, %v", want, err)
	}
	for round := 0; round < 50 && (round < 3 || s.sharedEntries.Load() == 0); round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i%2 == 0 {
					st, err := s.readStateAfter(ctx, "p1", sc.Version())
					if err != nil || st.Client != nil || st.Partition != want.Partition || !reflect.DeepEqual(st.Gate, want.Gate) {
						t.Errorf("state after: %+v (client %v), %v; want %+v", st, st.Client, err, want)
					}
					return
				}
				st, err := s.ReadRequestState(ctx, "p1", "c1", sc.Version())
				if err != nil || st.Client == nil || !reflect.DeepEqual(*st.Client, *want.Client) || st.Partition != want.Partition {
					t.Errorf("entry: %+v (client %v), %v", st, st.Client, err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	if s.sharedEntries.Load() == 0 {
		t.Fatal("no read was answered by a shared read")
	}
}
