package store

import (
	"context"
	"testing"
	"time"
)

// TestAdvanceManySettlesPending: a batch of acks settles the pending
// deferred writes of the records it updated as single acks do: one the
// ack passed (or reached) is dropped, one ahead of it now expects the
// ack's cursor, and one of a record the batch did not update is kept as
// it was.
func TestAdvanceManySettlesPending(t *testing.T) {
	w := NewClientWriteBehind(time.Hour, func(context.Context, []DeferredClient) error { return nil })
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	for _, c := range []struct {
		id     string
		cursor int64
	}{{"passed", 10}, {"reached", 12}, {"ahead", 20}, {"not updated", 20}} {
		if err := w.Defer("p", "e", ClientRecord{ClientID: c.id, ActorID: "a", WireVersion: 3, Cursor: c.cursor}, 5); err != nil {
			t.Fatal(err)
		}
	}
	advances := []CursorAdvance{{ClientID: "passed", Cursor: 12}, {ClientID: "reached", Cursor: 12},
		{ClientID: "ahead", Cursor: 12}, {ClientID: "not updated", Cursor: 12}}
	updated, err := w.AdvanceMany("p", advances, func() ([]bool, error) { return []bool{true, true, true, false}, nil })
	if err != nil || len(updated) != 4 {
		t.Fatalf("AdvanceMany = %v, %v", updated, err)
	}
	want := map[string]*int64{"passed": nil, "reached": nil, "ahead": ptr(int64(12)), "not updated": ptr(int64(5))}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, base := range want {
		d, ok := w.pending[clientKey{"p", id}]
		switch {
		case base == nil && ok:
			t.Errorf("%s: still pending (base %d, cursor %d), want dropped", id, d.BaseCursor, d.Cursor)
		case base != nil && !ok:
			t.Errorf("%s: dropped, want pending with base %d", id, *base)
		case base != nil && d.BaseCursor != *base:
			t.Errorf("%s: base %d, want %d", id, d.BaseCursor, *base)
		}
	}
}

func ptr[T any](v T) *T { return &v }
