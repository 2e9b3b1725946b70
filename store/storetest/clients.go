package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunClients tests client records, realtime cursor advances and the
// active cursor floor.
func RunClients(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"RoundTrip", testClientRoundTrip},
		{"Absent", testClientAbsent},
		{"AdvanceCursor", testAdvanceCursor},
		{"AdvanceAbsent", testAdvanceAbsent},
		{"AdvanceCursors", testAdvanceCursors},
		{"ActiveCursorFloor", testActiveCursorFloor},
		{"NoRebind", testClientNoRebind},
		{"Bind", testClientBind},
		{"BindRace", testClientBindRace},
	})
}

// testClientNoRebind: PutClient never moves a clientId to another actor.
func testClientNoRebind(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	rec := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 4, UpdatedAtMs: 10}
	e.putClient("p1", rec)
	other := rec
	other.ActorID, other.Cursor = "a2", 9
	if err := e.s.PutClient(e.ctx, "p1", other); !errors.Is(err, store.ErrClientBound) {
		t.Errorf("PutClient(other actor) = %v; want ErrClientBound", err)
	}
	e.wantClient("p1", rec)
	// The same actor still replaces its record.
	rec.Cursor = 7
	e.putClient("p1", rec)
	e.wantClient("p1", rec)
}

// testClientBind: BindClient creates a record once and returns the stored
// one afterwards, never overwriting it.
func testClientBind(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	first := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: -1, UpdatedAtMs: 10}
	got, err := e.s.BindClient(e.ctx, "p1", first)
	if err != nil || !sameClient(got, first) {
		t.Fatalf("BindClient(new) = %s, %v; want %s", fmtClient(got), err, fmtClient(first))
	}
	e.wantClient("p1", first)
	second := store.ClientRecord{ClientID: "c1", ActorID: "a2", WireVersion: 2, Cursor: -1, UpdatedAtMs: 20}
	got, err = e.s.BindClient(e.ctx, "p1", second)
	if err != nil || !sameClient(got, first) {
		t.Errorf("BindClient(bound) = %s, %v; want the stored %s", fmtClient(got), err, fmtClient(first))
	}
	e.wantClient("p1", first)
	// Records are per partition.
	got, err = e.s.BindClient(e.ctx, "p2", second)
	if err != nil || got.ActorID != "a2" {
		t.Errorf("BindClient(p2) = %s, %v; want actor a2", fmtClient(got), err)
	}
}

// testClientBindRace: of actors binding one fresh clientId at once,
// exactly one gets its own actor back, and every caller sees that one.
func testClientBindRace(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	const actors = 8
	for round := range 5 {
		id := "race-" + string(rune('a'+round))
		var wg sync.WaitGroup
		got := make([]store.ClientRecord, actors)
		errs := make([]error, actors)
		start := make(chan struct{})
		for i := range actors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = e.s.BindClient(e.ctx, "p1", store.ClientRecord{ClientID: id,
					ActorID: "actor-" + string(rune('0'+i)), WireVersion: 3, Cursor: -1, UpdatedAtMs: 1})
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range actors {
			if errs[i] != nil {
				t.Fatalf("BindClient: %v", errs[i])
			}
			if got[i].ActorID != got[0].ActorID {
				t.Errorf("round %d: callers saw different bindings %q and %q", round, got[0].ActorID, got[i].ActorID)
			}
			if got[i].ActorID == "actor-"+string(rune('0'+i)) {
				winners++
			}
		}
		if winners != 1 {
			t.Errorf("round %d: %d callers got their own actor back; want exactly 1", round, winners)
		}
	}
}

func (e *env) putClient(partition string, rec store.ClientRecord) {
	e.t.Helper()
	if err := e.s.PutClient(e.ctx, partition, rec); err != nil {
		e.t.Fatalf("PutClient(%q, %s): %v", partition, rec.ClientID, err)
	}
}

func (e *env) wantClient(partition string, want store.ClientRecord) {
	e.t.Helper()
	got, err := e.s.Client(e.ctx, partition, want.ClientID)
	if err != nil || !sameClient(got, want) {
		e.t.Errorf("Client(%q, %q) = %s, %v;\nwant %s", partition, want.ClientID, fmtClient(got), err, fmtClient(want))
	}
}

func testClientRoundTrip(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	recs := []store.ClientRecord{
		{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 17, UpdatedAtMs: 1_700_000_000_000,
			Subscriptions: []store.SubscriptionRecord{
				{ID: "s1", Table: TableTasks, Scopes: map[string][]string{VarProject: {"p1", "p2"}}},
				{ID: "s2", Table: TableNotes, Scopes: map[string][]string{VarProject: {"p1"}, VarTeam: {"t1", "t\"2"}}},
			}},
		{ClientID: "c2", ActorID: "a2", WireVersion: 1, Cursor: -1, UpdatedAtMs: 5},
	}
	for _, rec := range recs {
		e.putClient("p1", rec)
		e.wantClient("p1", rec)
	}
	replaced := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 2, Cursor: 20, UpdatedAtMs: 1_700_000_000_500,
		Subscriptions: []store.SubscriptionRecord{{ID: "s3", Table: TableTasks, Scopes: map[string][]string{VarProject: {"p9"}}}}}
	e.putClient("p1", replaced)
	e.wantClient("p1", replaced)
	e.wantClient("p1", recs[1])
	if got, err := e.s.Client(e.ctx, "p2", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Client(p2, c1) = %s, %v; want ErrNotFound (records are per partition)", fmtClient(got), err)
	}
}

func testClientAbsent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	if got, err := e.s.Client(e.ctx, "p1", "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Client(absent) = %s, %v; want ErrNotFound", fmtClient(got), err)
	}
}

func testAdvanceCursor(t *testing.T, open Opener) {
	base := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 10, UpdatedAtMs: 1000,
		Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: TableTasks, Scopes: map[string][]string{VarProject: {"p1"}}}}}
	advanced := base
	advanced.Cursor, advanced.UpdatedAtMs = 15, 2000
	// An ack stamped before the record's last write (a sync round that
	// ran while the ack waited for its flush) keeps the later time: the
	// cursor and the activity time each move to their maximum (§8.2).
	advancedEarlier := base
	advancedEarlier.Cursor = 15
	tests := []struct {
		name    string
		a       store.CursorAdvance
		want    bool
		wantErr error
		after   store.ClientRecord
	}{
		{"forward", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 15, AtMs: 2000}, true, nil, advanced},
		{"forward, stamped earlier", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 15, AtMs: 500}, true, nil, advancedEarlier},
		{"same cursor", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 10, AtMs: 2000}, false, nil, base},
		{"backwards", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 3, AtMs: 2000}, false, nil, base},
		{"other actor", store.CursorAdvance{ClientID: "c1", ActorID: "a2", LogEpoch: epochOf("p1"), Cursor: 15, AtMs: 2000}, false, nil, base},
		{"stale epoch", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: "stale", Cursor: 15, AtMs: 2000}, false, store.ErrEpochMismatch, base},
		{"stored subscriptions", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 15, AtMs: 2000,
			Subscriptions: store.SubscriptionsDigest(base.Subscriptions)}, true, nil, advanced},
		{"other subscriptions", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 15, AtMs: 2000,
			Subscriptions: store.SubscriptionsDigest(append(base.Subscriptions, store.SubscriptionRecord{ID: "s2", Table: TableTasks,
				Scopes: map[string][]string{VarProject: {"p2"}}}))}, false, nil, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, open)
			e.touch("p1")
			e.putClient("p1", base)
			got, err := e.s.AdvanceClientCursor(e.ctx, "p1", tt.a)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("AdvanceClientCursor(%+v) = %t, %v; want %t, %v", tt.a, got, err, tt.want, tt.wantErr)
			}
			e.wantClient("p1", tt.after)
		})
	}
	t.Run("max wins", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, open)
		e.touch("p1")
		e.putClient("p1", base)
		for _, c := range []int64{12, 20, 15} {
			if _, err := e.s.AdvanceClientCursor(e.ctx, "p1", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: c, AtMs: 2000}); err != nil {
				t.Fatalf("AdvanceClientCursor(%d): %v", c, err)
			}
		}
		want := base
		want.Cursor, want.UpdatedAtMs = 20, 2000
		e.wantClient("p1", want)
	})
}

// testAdvanceCursors: a store that applies a batch of acks in one write
// (store.CursorBatchAdvancer) applies each as AdvanceClientCursor would:
// forward only, the record's own actor, the partition's epoch (an ack of
// another is skipped without failing the others), no record created; of
// two acks of one client the higher stays.
func testAdvanceCursors(t *testing.T, open Opener) {
	e := newEnv(t, open)
	b, ok := e.s.(store.CursorBatchAdvancer)
	if !ok {
		t.Skip("the store applies acks one at a time")
	}
	e.touch("p1")
	base := func(id string) store.ClientRecord {
		return store.ClientRecord{ClientID: id, ActorID: "a1", WireVersion: 3, Cursor: 10, UpdatedAtMs: 1000}
	}
	for _, id := range []string{"fwd", "same", "back", "actor", "stale", "twice", "subs", "other-subs"} {
		rec := base(id)
		if id == "subs" || id == "other-subs" {
			rec.Subscriptions = []store.SubscriptionRecord{{ID: "s1", Table: TableTasks, Scopes: map[string][]string{VarProject: {"p1"}}}}
		}
		e.putClient("p1", rec)
	}
	// A socket acks for the list it registered: the stored one, or one
	// that a pull over HTTP has replaced since.
	withSubs := func(a store.CursorAdvance, subs ...store.SubscriptionRecord) store.CursorAdvance {
		a.Subscriptions = store.SubscriptionsDigest(subs)
		return a
	}
	s1 := store.SubscriptionRecord{ID: "s1", Table: TableTasks, Scopes: map[string][]string{VarProject: {"p1"}}}
	ack := func(id, actor, epoch string, cursor int64) store.CursorAdvance {
		return store.CursorAdvance{ClientID: id, ActorID: actor, LogEpoch: epoch, Cursor: cursor, AtMs: 2000}
	}
	ep := epochOf("p1")
	advances := []store.CursorAdvance{
		ack("twice", "a1", ep, 12), ack("fwd", "a1", ep, 15), ack("same", "a1", ep, 10), ack("back", "a1", ep, 3),
		ack("actor", "a2", ep, 15), ack("stale", "a1", "stale", 15), ack("nobody", "a1", ep, 15), ack("twice", "a1", ep, 20),
		withSubs(ack("subs", "a1", ep, 15), s1), withSubs(ack("other-subs", "a1", ep, 15)),
	}
	updated, err := b.AdvanceClientCursors(e.ctx, "p1", advances)
	if err != nil {
		t.Fatalf("AdvanceClientCursors: %v", err)
	}
	if len(updated) != len(advances) {
		t.Fatalf("AdvanceClientCursors reported %d results for %d acks", len(updated), len(advances))
	}
	for i, want := range []bool{updated[0], true, false, false, false, false, false, true, true, false} {
		if updated[i] != want {
			t.Errorf("ack %d (%s to %d): updated %t, want %t", i, advances[i].ClientID, advances[i].Cursor, updated[i], want)
		}
	}
	moved := func(id string, cursor int64) store.ClientRecord {
		r := base(id)
		r.Cursor, r.UpdatedAtMs = cursor, 2000
		return r
	}
	e.wantClient("p1", moved("fwd", 15))
	e.wantClient("p1", moved("twice", 20))
	for _, id := range []string{"same", "back", "actor", "stale"} {
		e.wantClient("p1", base(id))
	}
	withList := func(r store.ClientRecord) store.ClientRecord {
		r.Subscriptions = []store.SubscriptionRecord{s1}
		return r
	}
	e.wantClient("p1", withList(moved("subs", 15)))
	e.wantClient("p1", withList(base("other-subs")))
	if rec, err := e.s.Client(e.ctx, "p1", "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Client after acking an absent record = %s, %v; want ErrNotFound", fmtClient(rec), err)
	}
}

func testAdvanceAbsent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	got, err := e.s.AdvanceClientCursor(e.ctx, "p1", store.CursorAdvance{ClientID: "c1", ActorID: "a1", LogEpoch: epochOf("p1"), Cursor: 5, AtMs: 2000})
	if got || err != nil {
		t.Errorf("AdvanceClientCursor(no record) = %t, %v; want false, nil", got, err)
	}
	if rec, err := e.s.Client(e.ctx, "p1", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Client after advancing an absent record = %s, %v; want ErrNotFound", fmtClient(rec), err)
	}
}

func testActiveCursorFloor(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	e.touch("p2")
	e.touch("empty")
	for _, r := range []store.ClientRecord{
		{ClientID: "old", ActorID: "a", Cursor: 3, UpdatedAtMs: 100},
		{ClientID: "mid", ActorID: "a", Cursor: 5, UpdatedAtMs: 500},
		{ClientID: "new", ActorID: "a", Cursor: 10, UpdatedAtMs: 1000},
		{ClientID: "none", ActorID: "a", Cursor: -1, UpdatedAtMs: 2000},
	} {
		e.putClient("p1", r)
	}
	e.putClient("p2", store.ClientRecord{ClientID: "other", ActorID: "a", Cursor: 1, UpdatedAtMs: 5000})
	tests := []struct {
		partition string
		since     int64
		floor     int64
		ok        bool
	}{
		{"p1", 0, 3, true},
		{"p1", 100, 3, true},
		{"p1", 101, 5, true},
		{"p1", 500, 5, true},
		{"p1", 501, 10, true},
		{"p1", 1500, 0, false},
		{"p1", 3000, 0, false},
		{"p2", 0, 1, true},
		{"empty", 0, 0, false},
	}
	for _, tt := range tests {
		floor, ok, err := e.s.ActiveCursorFloor(e.ctx, tt.partition, tt.since)
		if err != nil || ok != tt.ok || (ok && floor != tt.floor) {
			t.Errorf("ActiveCursorFloor(%q, %d) = %d, %t, %v; want %d, %t", tt.partition, tt.since, floor, ok, err, tt.floor, tt.ok)
		}
	}
}
