package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAdvanceManySettlesPending: a batch of acks settles the pending
// deferred writes of the records it updated as single acks do: one the
// ack passed (or reached) is dropped, one ahead of it now expects the
// ack's cursor, and one of a record the batch did not update is kept as
// it was.
func TestAdvanceManySettlesPending(t *testing.T) {
	w := NewClientWriteBehind(time.Hour, func(context.Context, []DeferredClient) error { return nil }, nil)
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

// TestDeferredWritesThatKeepFailing: a record whose batches keep failing
// is written in at most maxDeferredFailures of them, then dropped with a
// warning, and the write-behind refuses new records past
// MaxDeferredClients (the caller writes those itself) instead of holding
// every client that pulls while the database refuses writes.
func TestDeferredWritesThatKeepFailing(t *testing.T) {
	var logged strings.Builder
	attempts := map[string]int{}
	fail := errors.New("database refuses writes")
	w := NewClientWriteBehind(time.Hour, func(_ context.Context, batch []DeferredClient) error {
		for _, d := range batch {
			attempts[d.ClientID]++
		}
		return fail
	}, slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	ctx := context.Background()
	if err := w.Defer("p", "e", ClientRecord{ClientID: "c", ActorID: "a", WireVersion: 3, Cursor: 7}, 5); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*maxDeferredFailures; i++ {
		if err := w.Flush(ctx); err != nil && !errors.Is(err, fail) {
			t.Fatalf("Flush %d: %v", i, err)
		}
	}
	if attempts["c"] != maxDeferredFailures || w.Pending() != 0 {
		t.Errorf("a record whose writes keep failing: written in %d batches, %d still pending; want %d batches, then dropped",
			attempts["c"], w.Pending(), maxDeferredFailures)
	}
	if !strings.Contains(logged.String(), "deferred client records dropped") {
		t.Errorf("no warning of the dropped record; log: %q", logged.String())
	}

	for i := range MaxDeferredClients {
		if err := w.Defer("p", "e", ClientRecord{ClientID: fmt.Sprint("c", i), ActorID: "a", WireVersion: 3, Cursor: 7}, 5); err != nil {
			t.Fatalf("Defer of record %d: %v", i, err)
		}
	}
	err := w.Defer("p", "e", ClientRecord{ClientID: "one more", ActorID: "a", WireVersion: 3, Cursor: 7}, 5)
	if !errors.Is(err, ErrDeferFull) || w.Pending() != MaxDeferredClients {
		t.Errorf("Defer past the bound: %v with %d pending; want ErrDeferFull with %d", err, w.Pending(), MaxDeferredClients)
	}
	// A record already held still moves forward.
	if err := w.Defer("p", "e", ClientRecord{ClientID: "c0", ActorID: "a", WireVersion: 3, Cursor: 9}, 5); err != nil {
		t.Errorf("Defer of a held record at the bound: %v", err)
	}
}
