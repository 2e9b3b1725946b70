package storetest

import (
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunDeferredClients tests the deferred client writes of a driver that
// implements store.ClientDeferrer: a deferred cursor is visible to the
// store's own reads at once and in the database after Close, never
// overwrites a newer write (an ack, a synchronous write, another
// process's write, an epoch rotation) and counts for the active cursor
// floor. A store without store.ClientDeferrer skips the area; tests that
// need a second process skip without a [Reopener].
func RunDeferredClients(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"VisibleThenWrittenAtClose", testDeferredWrittenAtClose},
		{"Coalesced", testDeferredCoalesced},
		{"ManyClients", testDeferredMany},
		{"AckAhead", testDeferredAckAhead},
		{"AckBehind", testDeferredAckBehind},
		{"SyncWriteWins", testDeferredSyncWins},
		{"OtherProcessWins", testDeferredOtherProcessWins},
		{"EpochRotation", testDeferredEpochRotation},
		{"ActiveCursorFloor", testDeferredFloor},
	})
}

// deferEnv is a store with deferred client writes and a second store on
// its database, the view of another process.
type deferEnv struct {
	*env
	d     store.ClientDeferrer
	other store.Store
}

func newDeferEnv(t *testing.T, open Opener) *deferEnv {
	t.Helper()
	e := newEnv(t, open)
	d, ok := e.s.(store.ClientDeferrer)
	if !ok {
		t.Skip("the store does not implement store.ClientDeferrer")
	}
	other := reopen(t, e.s)
	if other == nil {
		t.Skip(skipNoReopen)
	}
	e.touch("p1")
	return &deferEnv{env: e, d: d, other: other}
}

// base is the record the deferred writes start from.
func deferBase(id string) store.ClientRecord {
	return store.ClientRecord{ClientID: id, ActorID: "a1", WireVersion: 3, Cursor: 5, UpdatedAtMs: 1000,
		Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}}
}

func (e *deferEnv) deferCursor(rec store.ClientRecord, cursor, at, base int64) store.ClientRecord {
	e.t.Helper()
	rec.Cursor, rec.UpdatedAtMs = cursor, at
	if err := e.d.DeferClient(e.ctx, "p1", epochOf("p1"), rec, base); err != nil {
		e.t.Fatalf("DeferClient(%s, cursor %d): %v", rec.ClientID, cursor, err)
	}
	return rec
}

func (e *deferEnv) close() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
}

// wantStored checks the record as the other process reads it.
func (e *deferEnv) wantStored(want store.ClientRecord) {
	e.t.Helper()
	got, err := e.other.Client(e.ctx, "p1", want.ClientID)
	if err != nil || !sameClient(got, want) {
		e.t.Errorf("stored record %q = %s, %v;\nwant %s", want.ClientID, fmtClient(got), err, fmtClient(want))
	}
}

// testDeferredWrittenAtClose: the store's own reads see a deferred cursor
// at once; Close writes it.
func testDeferredWrittenAtClose(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	rec = e.deferCursor(rec, 9, 1500, 5)
	e.wantClient("p1", rec)
	e.close()
	e.wantStored(rec)
}

// testDeferredCoalesced: the deferred writes of one record keep the
// newest cursor and update time.
func testDeferredCoalesced(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 7, 1100, 5)
	want := e.deferCursor(rec, 9, 1300, 7)
	e.deferCursor(rec, 8, 1200, 9) // a slower request of the same client
	e.wantClient("p1", want)
	e.close()
	e.wantStored(want)
}

// testDeferredMany: one batch writes the deferred records of many clients.
func testDeferredMany(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	var want []store.ClientRecord
	for i := range 50 {
		rec := deferBase(fmt.Sprintf("c%02d", i))
		e.putClient("p1", rec)
		want = append(want, e.deferCursor(rec, int64(10+i), 2000, 5))
	}
	e.close()
	for _, rec := range want {
		e.wantStored(rec)
	}
}

// testDeferredAckAhead: an ack past a deferred cursor is kept.
func testDeferredAckAhead(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 9, 1500, 5)
	ok, err := e.s.AdvanceClientCursor(e.ctx, "p1", store.CursorAdvance{ClientID: "c1", ActorID: "a1",
		LogEpoch: epochOf("p1"), Cursor: 12, AtMs: 1600})
	if !ok || err != nil {
		t.Fatalf("AdvanceClientCursor(12) = %t, %v; want true", ok, err)
	}
	rec.Cursor, rec.UpdatedAtMs = 12, 1600
	e.wantClient("p1", rec)
	e.close()
	e.wantStored(rec)
}

// testDeferredAckBehind: an ack behind a deferred cursor does not lose
// the deferred one.
func testDeferredAckBehind(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	want := e.deferCursor(rec, 20, 1700, 5)
	ok, err := e.s.AdvanceClientCursor(e.ctx, "p1", store.CursorAdvance{ClientID: "c1", ActorID: "a1",
		LogEpoch: epochOf("p1"), Cursor: 12, AtMs: 1600})
	if !ok || err != nil {
		t.Fatalf("AdvanceClientCursor(12) = %t, %v; want true", ok, err)
	}
	e.wantClient("p1", want)
	e.close()
	e.wantStored(want)
}

// testDeferredSyncWins: a synchronous write after a deferred one (a
// re-bootstrap moving the cursor back, a new subscription list) is what
// stays.
func testDeferredSyncWins(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 9, 1500, 5)
	rec.Cursor, rec.UpdatedAtMs = 2, 1600
	rec.Subscriptions = append(rec.Subscriptions, store.SubscriptionRecord{ID: "s2", Table: "tasks",
		Scopes: map[string][]string{"project_id": {"p2"}}})
	e.putClient("p1", rec)
	e.wantClient("p1", rec)
	e.close()
	e.wantStored(rec)
}

// testDeferredOtherProcessWins: a write by another process between the
// read and the deferred write wins, even when it moves the cursor back.
func testDeferredOtherProcessWins(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 9, 1500, 5)
	rec.Cursor, rec.UpdatedAtMs = 3, 1400
	if err := e.other.PutClient(e.ctx, "p1", rec); err != nil {
		t.Fatalf("other PutClient: %v", err)
	}
	e.wantClient("p1", rec)
	e.close()
	e.wantStored(rec)
}

// testDeferredEpochRotation: a deferred write of the old epoch never
// lands on the record of the new one, even one equal to what it read.
func testDeferredEpochRotation(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 9, 1500, 5)
	if err := e.other.RotateLogEpoch(e.ctx, "p1", "epoch-new", 1400); err != nil {
		t.Fatalf("other RotateLogEpoch: %v", err)
	}
	if err := e.other.PutClient(e.ctx, "p1", rec); err != nil { // the same record again
		t.Fatalf("other PutClient: %v", err)
	}
	e.close()
	e.wantStored(rec)
}

// testDeferredFloor: the active cursor floor counts a deferred record,
// its cursor and update time.
func testDeferredFloor(t *testing.T, open Opener) {
	e := newDeferEnv(t, open)
	rec := deferBase("c1")
	e.putClient("p1", rec)
	e.deferCursor(rec, 9, 1500, 5)
	floor, ok, err := e.s.ActiveCursorFloor(e.ctx, "p1", 1200)
	if err != nil || !ok || floor != 9 {
		t.Errorf("ActiveCursorFloor(since 1200) = %d, %t, %v; want 9, true", floor, ok, err)
	}
	floor, ok, err = e.other.ActiveCursorFloor(e.ctx, "p1", 1200)
	if err != nil || !ok || floor != 9 {
		t.Errorf("other ActiveCursorFloor(since 1200) = %d, %t, %v; want 9, true", floor, ok, err)
	}
}
