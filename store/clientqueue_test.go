package store

import (
	"context"
	"slices"
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

// Subscription lists that differ only in how their values split (one
// value holding the old separator bytes against two values, a key and a
// value swapped across the boundary) have different digests; equal lists
// have the same one.
func TestSubscriptionsDigestTellsSplitsApart(t *testing.T) {
	sub := func(id string, scopes map[string][]string) SubscriptionRecord {
		return SubscriptionRecord{ID: id, Table: "tasks", Scopes: scopes}
	}
	lists := [][]SubscriptionRecord{
		{sub("s", map[string][]string{"p": {"a\x02b"}})},
		{sub("s", map[string][]string{"p": {"a", "b"}})},
		{sub("s", map[string][]string{"p": {"ab"}})},
		{sub("s\x00tasks", map[string][]string{"p": {"a"}})},
		{sub("s", map[string][]string{"p\x01a": nil})},
		{sub("s", map[string][]string{"p": {"a"}}), sub("t", nil)},
		{sub("s", map[string][]string{"p": {"a\x03\x00t\x00tasks"}})},
	}
	seen := map[uint64]int{}
	for i, l := range lists {
		d := SubscriptionsDigest(l)
		if j, ok := seen[d]; ok {
			t.Errorf("lists %d and %d share digest %x", j, i, d)
		}
		seen[d] = i
		if again := SubscriptionsDigest(slices.Clone(l)); again != d {
			t.Errorf("list %d: digest %x, then %x", i, d, again)
		}
	}
}
