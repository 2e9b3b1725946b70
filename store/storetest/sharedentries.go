package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// CheckSharedEntries checks a store's shared request state reads: the
// request entries of one partition asked at once, through
// ReadRequestState, get what each read alone gets: the partition, the
// serve gate at running and the client's own record (with this process's
// deferred cursor write applied, none for a client without a record, each
// its own copy when a client asks twice); a partition without a row
// answers ErrNotFound to all of them. The store s must have its schema
// ensured; alone reads one entry without sharing; shared counts the
// answers of shared reads, and the check fails when it stays at zero.
func CheckSharedEntries(t *testing.T, s store.Store, running int32, alone func(ctx context.Context, partition, clientID string) (store.RequestState, error), shared func() int64) {
	t.Helper()
	rs, ok := s.(store.RequestStateReader)
	if !ok {
		t.Fatal("the store reads no request state")
	}
	ctx := t.Context()
	const p = "p1"
	if _, err := s.TouchPartition(ctx, p, 1000, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	ApplyUpsert(t, s, p, Task{ID: "t1", ProjectID: "a"}.RowWrite(t, 1))
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		if i%4 == 3 {
			continue // no record
		}
		rec := store.ClientRecord{ClientID: id, ActorID: fmt.Sprintf("a%d", i), WireVersion: 3, Cursor: int64(i), UpdatedAtMs: 5000,
			Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: TableTasks, Scopes: map[string][]string{"project_id": {id}}}}}
		if err := s.PutClient(ctx, p, rec); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// A deferred cursor move, not written yet: read through the
			// overlay.
			moved := rec
			moved.Cursor, moved.UpdatedAtMs = int64(i)+100, 6000
			if err := s.(store.ClientDeferrer).DeferClient(ctx, p, "epoch-1", moved, rec.Cursor); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]store.RequestState{}
	for _, id := range ids {
		st, err := alone(ctx, p, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = st
	}
	if w := want["c3"]; w.Client != nil {
		t.Fatalf("c3 has a record: %+v", *w.Client)
	}
	if w := want["c0"]; w.Client == nil || w.Client.Cursor != 100 {
		t.Fatalf("c0's deferred cursor is not read: %+v", w.Client)
	}
	for round := 0; round < 50 && (round < 3 || shared() == 0); round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		got := make([]store.RequestState, 2*len(ids))
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				st, err := rs.ReadRequestState(ctx, p, ids[i%len(ids)], running)
				if err != nil {
					t.Error(err)
				}
				got[i] = st
			}()
		}
		close(start)
		wg.Wait()
		for i, st := range got {
			id := ids[i%len(ids)]
			w := want[id]
			if st.Partition != w.Partition || !reflect.DeepEqual(st.Gate, w.Gate) || (st.Client == nil) != (w.Client == nil) ||
				st.Client != nil && !reflect.DeepEqual(*st.Client, *w.Client) {
				t.Errorf("%s: %+v (client %+v), alone %+v (client %+v)", id, st, st.Client, w, w.Client)
			}
			if j := i + len(ids); j < len(got) && st.Client != nil && got[j].Client == st.Client {
				t.Errorf("%s: two answers share one record", id)
			}
		}
	}
	if shared() == 0 {
		t.Fatal("no read was answered by a shared read")
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := rs.ReadRequestState(ctx, "nowhere", id, running); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("an unknown partition: %v; want ErrNotFound", err)
			}
		}()
	}
	close(start)
	wg.Wait()
}
