package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// RunReactions tests durable reaction storage (store.ReactionTx and
// store.ReactionStore, §6.9): rows enqueued in a write commit and roll back
// with it (a failed Candidate included); a claim leases due rows of its
// types only, oldest due first, counting an attempt; transitions compare
// the lease owner; expired leases return to pending (or dead-letter on the
// last attempt) and are claimed again; the backlog; list, retry, drop and
// prune; concurrent claims get disjoint rows. A driver that is not a
// store.ReactionStore skips it.
func RunReactions(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"EnqueueAtomic", testReactionEnqueueAtomic},
		{"ClaimAndTransitions", testReactionTransitions},
		{"ExpiredLeases", testReactionExpiredLeases},
		{"BacklogListRetryDropPrune", testReactionOperator},
		{"ConcurrentClaims", testReactionConcurrentClaims},
		{"ReleaseClaim", testReactionReleaseClaim},
		{"SurviveLogPrune", testReactionSurviveLogPrune},
		{"Rename", testReactionRename},
	})
}

// testReactionSurviveLogPrune: pruning the commit log through the
// commits that planned reactions deletes none of them, in any state
// (§6.9: pruneCommitLog MUST NOT delete pending, leased, completed or
// dead-lettered reactions), and the pending ones are still claimed.
func testReactionSurviveLogPrune(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	rs := newReactions("c", "mail", 4, 100)
	e.enqueue("p", rs)
	e.enqueue("p", newReactions("d", "mail", 0, 100)) // a newer commit
	got := e.claim("w1", []string{"mail"}, 1000, 100_000, 3)
	if len(got) != 3 {
		t.Fatalf("claimed %d; want 3", len(got))
	}
	ok, err := e.rs.CompleteReaction(e.ctx, "p", got[0].IdempotencyKey, "w1", 1100)
	e.wantOK("CompleteReaction", ok, err, true)
	ok, err = e.rs.FailReaction(e.ctx, "p", got[1].IdempotencyKey, "w1", store.ReactionFailure{Code: "x", AtMs: 1100})
	e.wantOK("FailReaction", ok, err, true)
	before := e.list(store.ReactionQuery{Partition: "p", Limit: store.MaxReactionPage})
	newest := e.partition("p").MaxCommitSeq
	if r := e.prune("p", epochOf("p"), newest); r.HorizonSeq != newest {
		t.Fatalf("PruneThrough(%d) = %+v", newest, r)
	}
	after := e.list(store.ReactionQuery{Partition: "p", Limit: store.MaxReactionPage})
	if len(after) != len(before) {
		t.Fatalf("%d reactions after the log was pruned; %d before", len(after), len(before))
	}
	for i := range before {
		if a, b := after[i], before[i]; a.IdempotencyKey != b.IdempotencyKey || a.State != b.State || a.Attempts != b.Attempts ||
			string(a.Payload) != string(b.Payload) {
			t.Errorf("reaction %s was %s (%d attempts), is %s (%d) after the log prune", b.IdempotencyKey, b.State, b.Attempts, a.State, a.Attempts)
		}
	}
	if got := e.claim("w2", []string{"mail"}, 200_000, 300_000, 10); len(got) != 2 {
		t.Errorf("claimed %v after the log prune; want the pending one and the expired lease", keysOf(got))
	}
}

type reactionEnv struct {
	*env
	rs store.ReactionStore
}

func newReactionEnv(t *testing.T, open Opener) *reactionEnv {
	e := newEnv(t, open)
	rs, ok := e.s.(store.ReactionStore)
	if !ok {
		t.Skip("the driver is not a store.ReactionStore")
	}
	return &reactionEnv{env: e, rs: rs}
}

// newReactions returns n reactions of a commit, typed typ, created at
// createdAt.
func newReactions(commitID, typ string, n int, createdAt int64) []store.NewReaction {
	out := make([]store.NewReaction, n)
	for i := range out {
		out[i] = store.NewReaction{
			IdempotencyKey: store.ReactionIdempotencyKey("p", "c1", commitID, fmt.Sprintf("k%d", i)),
			Type:           typ, Version: 1, Payload: []byte(fmt.Sprintf(`{"i":%d,"s":"é\"<"}`, i)),
			SourceClientID: "c1", SourceClientCommitID: commitID, SourceCommitSeq: 7, CreatedAtMs: createdAt, MaxAttempts: 3,
		}
	}
	return out
}

// enqueue stores rs in a Write of the partition that appends a commit.
func (e *reactionEnv) enqueue(partition string, rs []store.NewReaction) {
	e.t.Helper()
	e.write(partition, func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.AppendCommit(ctx, newCommit()); err != nil {
			return err
		}
		return tx.(store.ReactionTx).EnqueueReactions(ctx, rs)
	})
}

func (e *reactionEnv) list(q store.ReactionQuery) []store.Reaction {
	e.t.Helper()
	out, err := e.rs.ListReactions(e.ctx, q)
	if err != nil {
		e.t.Fatalf("ListReactions(%+v): %v", q, err)
	}
	return out
}

func (e *reactionEnv) claim(owner string, types []string, now, until int64, limit int) []store.Reaction {
	e.t.Helper()
	out, err := e.rs.ClaimReactions(e.ctx, store.ReactionClaim{Owner: owner, Types: types, NowMs: now, LeaseUntilMs: until, Limit: limit})
	if err != nil {
		e.t.Fatalf("ClaimReactions(%s): %v", owner, err)
	}
	return out
}

func (e *reactionEnv) get(partition, key string) store.Reaction {
	e.t.Helper()
	for _, r := range e.list(store.ReactionQuery{Partition: partition, Limit: store.MaxReactionPage}) {
		if r.IdempotencyKey == key {
			return r
		}
	}
	e.t.Fatalf("reaction %s/%s not stored", partition, key)
	return store.Reaction{}
}

func (e *reactionEnv) wantOK(what string, ok bool, err error, want bool) {
	e.t.Helper()
	if err != nil || ok != want {
		e.t.Fatalf("%s = %v, %v; want %v", what, ok, err, want)
	}
}

func keysOf(rs []store.Reaction) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.IdempotencyKey
	}
	slices.Sort(out)
	return out
}

func testReactionEnqueueAtomic(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	e.touch("q")
	// A Write that fails stores nothing; a failed Candidate undoes its
	// rows while the Write goes on and commits the others.
	err := e.s.Write(e.ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.(store.ReactionTx).EnqueueReactions(ctx, newReactions("rolled-back", "mail", 2, 100)); err != nil {
			return err
		}
		return errBoom
	})
	if err != errBoom {
		t.Fatalf("Write = %v, want errBoom", err)
	}
	e.write("p", func(ctx context.Context, tx store.WriteTx) error {
		rt := tx.(store.ReactionTx)
		if err := tx.Candidate(ctx, func(ctx context.Context) error {
			if err := rt.EnqueueReactions(ctx, newReactions("candidate", "mail", 2, 100)); err != nil {
				return err
			}
			return errBoom
		}); err != errBoom {
			return fmt.Errorf("Candidate = %v, want errBoom", err)
		}
		return rt.EnqueueReactions(ctx, newReactions("kept", "mail", 2, 100))
	})
	e.enqueue("q", newReactions("other", "mail", 1, 100))
	got := e.list(store.ReactionQuery{Partition: "p"})
	want := newReactions("kept", "mail", 2, 100)
	if len(got) != len(want) {
		t.Fatalf("stored %v; want the 2 reactions of the committed write", keysOf(got))
	}
	for i, r := range got {
		w := want[i]
		var payload, wantPayload any
		if err := json.Unmarshal(r.Payload, &payload); err != nil {
			t.Fatalf("payload %q: %v", r.Payload, err)
		}
		_ = json.Unmarshal(w.Payload, &wantPayload)
		if r.Partition != "p" || r.IdempotencyKey != w.IdempotencyKey || r.Type != "mail" || r.Version != 1 ||
			!reflect.DeepEqual(payload, wantPayload) || r.SourceClientID != "c1" || r.SourceClientCommitID != "kept" ||
			r.SourceCommitSeq != 7 || r.CreatedAtMs != 100 || r.AvailableAtMs != 100 || r.State != store.ReactionPending ||
			r.Attempts != 0 || r.MaxAttempts != 3 || r.LeaseOwner != "" || r.LeaseExpiresAtMs != 0 || r.LastFailure != nil {
			t.Errorf("stored %+v; want %+v pending", r, w)
		}
	}
	if q := e.list(store.ReactionQuery{Partition: "q"}); len(q) != 1 || q[0].Partition != "q" {
		t.Errorf("partition q holds %+v", q)
	}
	if all := e.list(store.ReactionQuery{}); len(all) != 3 {
		t.Errorf("every partition holds %v; want 3", keysOf(all))
	}
	// Keyset paging.
	page := e.list(store.ReactionQuery{Limit: 2})
	rest := e.list(store.ReactionQuery{Limit: 2, AfterPartition: page[1].Partition, AfterKey: page[1].IdempotencyKey})
	if len(page) != 2 || len(rest) != 1 || rest[0].Partition != "q" {
		t.Errorf("pages %v then %v", keysOf(page), keysOf(rest))
	}
}

// ReleaseClaim gives back the leases of one claim (owner and lease end),
// with their attempts, and nothing of another claim or of a lease since
// extended.
func testReactionReleaseClaim(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	rs := newReactions("c", "mail", 4, 100)
	e.enqueue("p", rs)
	a := e.claim("w1", []string{"mail"}, 1000, 50_000, 3)
	b := e.claim("w2", []string{"mail"}, 1000, 50_000, 3)
	if len(a) != 3 || len(b) != 1 {
		t.Fatalf("claims took %d and %d; want 3 and 1", len(a), len(b))
	}
	ok, err := e.rs.ExtendReactionLease(e.ctx, "p", a[2].IdempotencyKey, "w1", 60_000)
	e.wantOK("ExtendReactionLease", ok, err, true)
	if n, err := e.rs.ReleaseClaim(e.ctx, "w1", 40_000, 1100); err != nil || n != 0 {
		t.Fatalf("ReleaseClaim of another lease end = %d, %v; want 0", n, err)
	}
	n, err := e.rs.ReleaseClaim(e.ctx, "w1", 50_000, 1100)
	if err != nil || n != 2 {
		t.Fatalf("ReleaseClaim = %d, %v; want the claim's 2 leases not extended since", n, err)
	}
	for _, r := range a[:2] {
		if got := e.get("p", r.IdempotencyKey); got.State != store.ReactionPending || got.Attempts != 0 ||
			got.AvailableAtMs != 1100 || got.LeaseOwner != "" || got.LeaseExpiresAtMs != 0 {
			t.Errorf("released %s: %+v; want pending at 1100, attempt given back", r.IdempotencyKey, got)
		}
	}
	if got := e.get("p", a[2].IdempotencyKey); got.State != store.ReactionLeased || got.LeaseOwner != "w1" {
		t.Errorf("the extended lease: %+v; want still leased to w1", got)
	}
	if got := e.get("p", b[0].IdempotencyKey); got.State != store.ReactionLeased || got.LeaseOwner != "w2" {
		t.Errorf("another claim's lease: %+v; want still leased to w2", got)
	}
	if got := e.claim("w3", []string{"mail"}, 1100, 90_000, 10); len(got) != 2 {
		t.Errorf("a claim after the release took %d; want the 2 released", len(got))
	}
}

func testReactionTransitions(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	rs := newReactions("c", "mail", 3, 100)
	rs = append(rs, newReactions("hook", "webhook", 1, 50)...)
	rs[1].CreatedAtMs = 500 // due later
	e.enqueue("p", rs)

	if got := e.claim("w1", []string{"other"}, 1000, 2000, 10); len(got) != 0 {
		t.Fatalf("a claim of another type took %v", keysOf(got))
	}
	if got := e.claim("w1", []string{"mail"}, 99, 2000, 10); len(got) != 0 {
		t.Fatalf("a claim before the reactions are due took %v", keysOf(got))
	}
	a := e.claim("w1", []string{"mail"}, 1000, 100_000, 2)
	if len(a) != 2 || !slices.Equal(keysOf(a), []string{rs[0].IdempotencyKey, rs[2].IdempotencyKey}) {
		t.Fatalf("claimed %v; want the two due first (%s, %s)", keysOf(a), rs[0].IdempotencyKey, rs[2].IdempotencyKey)
	}
	for _, r := range a {
		if r.State != store.ReactionLeased || r.LeaseOwner != "w1" || r.LeaseExpiresAtMs != 100_000 || r.Attempts != 1 ||
			r.Type != "mail" || len(r.Payload) == 0 {
			t.Errorf("claimed %+v; want leased to w1 until 100000, attempt 1", r)
		}
	}
	b := e.claim("w2", []string{"mail", "webhook"}, 1000, 100_000, 10)
	if !slices.Equal(keysOf(b), keysOf([]store.Reaction{{IdempotencyKey: rs[1].IdempotencyKey}, {IdempotencyKey: rs[3].IdempotencyKey}})) {
		t.Fatalf("second claim took %v; want the two others", keysOf(b))
	}
	if got := e.claim("w3", []string{"mail", "webhook"}, 1000, 100_000, 10); len(got) != 0 {
		t.Fatalf("a third claim took %v while every lease is valid", keysOf(got))
	}

	k0, k1, k2 := rs[0].IdempotencyKey, rs[1].IdempotencyKey, rs[2].IdempotencyKey
	// Another owner can change nothing.
	ok, err := e.rs.CompleteReaction(e.ctx, "p", k0, "w2", 1100)
	e.wantOK("CompleteReaction by another owner", ok, err, false)
	ok, err = e.rs.ExtendReactionLease(e.ctx, "p", k0, "w2", 9000)
	e.wantOK("ExtendReactionLease by another owner", ok, err, false)
	ok, err = e.rs.FailReaction(e.ctx, "p", k0, "w2", store.ReactionFailure{Code: "x", AtMs: 1100})
	e.wantOK("FailReaction by another owner", ok, err, false)
	ok, err = e.rs.ReleaseReaction(e.ctx, "p", k0, "w2", 1100)
	e.wantOK("ReleaseReaction by another owner", ok, err, false)
	ok, err = e.rs.ExtendReactionLease(e.ctx, "p", k0, "w1", 3000)
	e.wantOK("ExtendReactionLease", ok, err, true)
	if r := e.get("p", k0); r.LeaseExpiresAtMs != 3000 || r.State != store.ReactionLeased {
		t.Errorf("after the extension: %+v", r)
	}
	ok, err = e.rs.CompleteReaction(e.ctx, "p", k0, "w1", 1200)
	e.wantOK("CompleteReaction", ok, err, true)
	if r := e.get("p", k0); r.State != store.ReactionCompleted || r.CompletedAtMs != 1200 || r.LeaseOwner != "" || r.LeaseExpiresAtMs != 0 {
		t.Errorf("completed: %+v", r)
	}
	ok, err = e.rs.CompleteReaction(e.ctx, "p", k0, "w1", 1300)
	e.wantOK("a second CompleteReaction", ok, err, false)

	// A release gives the attempt back and makes the reaction due now.
	ok, err = e.rs.ReleaseReaction(e.ctx, "p", k1, "w2", 1400)
	e.wantOK("ReleaseReaction", ok, err, true)
	if r := e.get("p", k1); r.State != store.ReactionPending || r.Attempts != 0 || r.AvailableAtMs != 1400 || r.LeaseOwner != "" {
		t.Errorf("released: %+v", r)
	}
	if got := e.claim("w3", []string{"mail"}, 1400, 100_000, 10); len(got) != 1 || got[0].IdempotencyKey != k1 || got[0].Attempts != 1 {
		t.Fatalf("claim after the release = %+v; want %s at attempt 1", got, k1)
	}
	ok, err = e.rs.CompleteReaction(e.ctx, "p", k1, "w3", 1500)
	e.wantOK("CompleteReaction after the release", ok, err, true)

	// A retryable failure: pending again at the retry time, the failure
	// recorded.
	ok, err = e.rs.FailReaction(e.ctx, "p", k2, "w1", store.ReactionFailure{Code: "app.smtp_down", AtMs: 1100,
		Details: []byte(`{"status":503}`), RetryAtMs: 5000})
	e.wantOK("FailReaction (retry)", ok, err, true)
	r := e.get("p", k2)
	var failure struct {
		Code    string         `json:"code"`
		AtMs    int64          `json:"atMs"`
		Details map[string]any `json:"details"`
	}
	if err := json.Unmarshal(r.LastFailure, &failure); err != nil || failure.Code != "app.smtp_down" || failure.AtMs != 1100 ||
		failure.Details["status"] != float64(503) {
		t.Errorf("failure %s (%v)", r.LastFailure, err)
	}
	if r.State != store.ReactionPending || r.AvailableAtMs != 5000 || r.Attempts != 1 || r.LeaseOwner != "" {
		t.Errorf("after a retryable failure: %+v", r)
	}
	if got := e.claim("w4", []string{"mail"}, 4999, 9000, 10); len(got) != 0 {
		t.Errorf("claimed %v before the retry is due", keysOf(got))
	}
	got := e.claim("w4", []string{"mail"}, 5000, 100_000, 10)
	if len(got) != 1 || got[0].IdempotencyKey != k2 || got[0].Attempts != 2 {
		t.Fatalf("claim at the retry time = %+v; want %s at attempt 2", got, k2)
	}
	// Dead-lettered: kept, with the failure time as its time.
	ok, err = e.rs.FailReaction(e.ctx, "p", k2, "w4", store.ReactionFailure{Code: "app.refused", AtMs: 5100})
	e.wantOK("FailReaction (dead)", ok, err, true)
	if r := e.get("p", k2); r.State != store.ReactionDead || r.AvailableAtMs != 5100 || r.Attempts != 2 {
		t.Errorf("dead letter: %+v", r)
	}
	if got := e.claim("w5", []string{"mail"}, 1e12, 2e12, 10); slices.Contains(keysOf(got), k2) {
		t.Errorf("a dead letter was claimed")
	}

}

func testReactionExpiredLeases(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	rs := newReactions("c", "mail", 2, 100)
	rs[1].MaxAttempts = 1
	e.enqueue("p", rs)
	k0, k1 := rs[0].IdempotencyKey, rs[1].IdempotencyKey
	if got := e.claim("dead-process", []string{"mail"}, 1000, 2000, 10); len(got) != 2 {
		t.Fatalf("claimed %v", keysOf(got))
	}
	if got := e.claim("w2", []string{"mail"}, 1999, 3000, 10); len(got) != 0 {
		t.Fatalf("claimed %v before the leases expired", keysOf(got))
	}
	if b, err := e.rs.ReactionBacklog(e.ctx, 1999); err != nil || b.Running != 2 || b.Pending != 0 {
		t.Errorf("backlog with valid leases = %+v, %v; want 2 running", b, err)
	}
	if b, err := e.rs.ReactionBacklog(e.ctx, 2000); err != nil || b.Running != 0 || b.Pending != 2 || b.OldestPendingCreatedAtMs != 100 {
		t.Errorf("backlog with expired leases = %+v, %v; want 2 pending created at 100", b, err)
	}
	got := e.claim("w2", []string{"mail"}, 2000, 3000, 10)
	if len(got) != 1 || got[0].IdempotencyKey != k0 || got[0].Attempts != 2 || got[0].LeaseOwner != "w2" {
		t.Fatalf("claim after expiry = %+v; want %s again at attempt 2", got, k0)
	}
	// The reaction whose attempt was its last is a dead letter.
	r := e.get("p", k1)
	var failure struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.LastFailure, &failure)
	if r.State != store.ReactionDead || failure.Code != "reaction.lease_expired" || r.Attempts != 1 {
		t.Errorf("expired last attempt: %+v (%s)", r, r.LastFailure)
	}
	// The dead process can change nothing.
	ok, err := e.rs.CompleteReaction(e.ctx, "p", k0, "dead-process", 2100)
	e.wantOK("CompleteReaction by the expired owner", ok, err, false)
	ok, err = e.rs.CompleteReaction(e.ctx, "p", k0, "w2", 2100)
	e.wantOK("CompleteReaction by the new owner", ok, err, true)
}

func testReactionOperator(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	if b, err := e.rs.ReactionBacklog(e.ctx, 0); err != nil || b != (store.ReactionBacklog{}) {
		t.Fatalf("empty backlog = %+v, %v", b, err)
	}
	rs := newReactions("c", "mail", 5, 100)
	rs[4].CreatedAtMs = 50
	e.enqueue("p", rs)
	got := e.claim("w", []string{"mail"}, 1000, 10_000, 4)
	byKey := map[string]bool{}
	for _, r := range got {
		byKey[r.IdempotencyKey] = true
	}
	if len(got) != 4 || !byKey[rs[4].IdempotencyKey] {
		t.Fatalf("claimed %v", keysOf(got))
	}
	// One completed long ago, one completed recently, one dead long ago,
	// one dead recently, one pending (created at 100).
	done := []struct {
		key  string
		at   int64
		dead bool
	}{{got[0].IdempotencyKey, 1000, false}, {got[1].IdempotencyKey, 9000, false}, {got[2].IdempotencyKey, 1000, true}, {got[3].IdempotencyKey, 9000, true}}
	for _, d := range done {
		var (
			ok  bool
			err error
		)
		if d.dead {
			ok, err = e.rs.FailReaction(e.ctx, "p", d.key, "w", store.ReactionFailure{Code: "app.x", AtMs: d.at})
		} else {
			ok, err = e.rs.CompleteReaction(e.ctx, "p", d.key, "w", d.at)
		}
		e.wantOK("outcome of "+d.key, ok, err, true)
	}
	pendingKey := ""
	for _, r := range rs {
		if !byKey[r.IdempotencyKey] {
			pendingKey = r.IdempotencyKey
		}
	}
	b, err := e.rs.ReactionBacklog(e.ctx, 9500)
	if err != nil || b != (store.ReactionBacklog{Pending: 1, Running: 0, Dead: 2, OldestPendingCreatedAtMs: 100}) {
		t.Fatalf("backlog = %+v, %v; want 1 pending (created at 100), 2 dead", b, err)
	}
	dead := e.list(store.ReactionQuery{State: store.ReactionDead})
	if !slices.Equal(keysOf(dead), keysOf([]store.Reaction{{IdempotencyKey: done[2].key}, {IdempotencyKey: done[3].key}})) {
		t.Errorf("dead letters listed: %v", keysOf(dead))
	}
	// Retry and drop touch dead letters only.
	ok, err := e.rs.RetryReaction(e.ctx, "p", pendingKey, 9500)
	e.wantOK("RetryReaction of a pending reaction", ok, err, false)
	ok, err = e.rs.DropReaction(e.ctx, "p", done[0].key)
	e.wantOK("DropReaction of a completed reaction", ok, err, false)
	ok, err = e.rs.RetryReaction(e.ctx, "p", done[3].key, 9500)
	e.wantOK("RetryReaction", ok, err, true)
	if r := e.get("p", done[3].key); r.State != store.ReactionPending || r.Attempts != 0 || r.LastFailure != nil || r.AvailableAtMs != 9500 {
		t.Errorf("retried: %+v", r)
	}
	ok, err = e.rs.RetryReaction(e.ctx, "p", done[3].key, 9500)
	e.wantOK("a second RetryReaction", ok, err, false)
	// Prune: completed before 5000 and dead before 5000 go; the rest
	// stays, pending and retried included.
	c, d, err := e.rs.PruneReactions(e.ctx, 5000, 5000, 10)
	if err != nil || c != 1 || d != 1 {
		t.Fatalf("PruneReactions = %d, %d, %v; want 1 completed and 1 dead", c, d, err)
	}
	left := keysOf(e.list(store.ReactionQuery{}))
	want := []string{done[1].key, done[3].key, pendingKey}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("after pruning: %v; want %v", left, want)
	}
	ok, err = e.rs.DropReaction(e.ctx, "p", done[2].key)
	e.wantOK("DropReaction of a pruned reaction", ok, err, false)
	// A dead letter can be dropped.
	got = e.claim("w", []string{"mail"}, 10_000, 20_000, 10)
	for _, r := range got {
		ok, err := e.rs.FailReaction(e.ctx, "p", r.IdempotencyKey, "w", store.ReactionFailure{Code: "app.x", AtMs: 10_000})
		e.wantOK("FailReaction", ok, err, true)
		ok, err = e.rs.DropReaction(e.ctx, "p", r.IdempotencyKey)
		e.wantOK("DropReaction", ok, err, true)
	}
	if left := keysOf(e.list(store.ReactionQuery{})); !slices.Equal(left, []string{done[1].key}) {
		t.Errorf("after dropping: %v", left)
	}
}

// testReactionRename: RenameReactions moves the pending reactions and
// dead letters of one name to another, leaves leased and completed ones
// and other names alone, counts what it left, and a runner of the new
// name claims what moved, payload and key unchanged.
func testReactionRename(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	rn, ok := e.s.(store.ReactionRenamer)
	if !ok {
		t.Skip("the driver is not a store.ReactionRenamer")
	}
	e.touch("p")
	e.touch("q")
	e.enqueue("p", newReactions("c", "old", 5, 100))
	e.enqueue("p", newReactions("d", "other", 1, 100))
	e.enqueue("q", newReactions("c", "old", 1, 100))
	got := e.claim("w", []string{"old"}, 1000, 10_000, 3)
	if len(got) != 3 {
		t.Fatalf("claimed %d; want 3", len(got))
	}
	ok, err := e.rs.CompleteReaction(e.ctx, got[0].Partition, got[0].IdempotencyKey, "w", 1100)
	e.wantOK("CompleteReaction", ok, err, true)
	ok, err = e.rs.FailReaction(e.ctx, got[1].Partition, got[1].IdempotencyKey, "w", store.ReactionFailure{Code: "app.x", AtMs: 1100})
	e.wantOK("FailReaction", ok, err, true)
	// Now under "old": 1 completed, 1 dead letter, 1 leased, 3 pending
	// (two in p, one in q); "other": 1 pending.
	before := map[string]store.Reaction{}
	for _, r := range e.list(store.ReactionQuery{}) {
		before[r.Partition+"/"+r.IdempotencyKey] = r
	}
	r, err := rn.RenameReactions(e.ctx, "old", "new")
	if err != nil || r != (store.ReactionRename{Pending: 3, Dead: 1, Leased: 1}) {
		t.Fatalf("RenameReactions = %+v, %v; want 3 pending and 1 dead moved, 1 leased left", r, err)
	}
	for _, a := range e.list(store.ReactionQuery{}) {
		b := before[a.Partition+"/"+a.IdempotencyKey]
		want := b.Type
		if b.Type == "old" && (b.State == store.ReactionPending || b.State == store.ReactionDead) {
			want = "new"
		}
		if a.Type != want || a.State != b.State || a.Attempts != b.Attempts || a.AvailableAtMs != b.AvailableAtMs ||
			string(a.Payload) != string(b.Payload) {
			t.Errorf("%s/%s: was %s %s (%d attempts), is %s %s (%d); want name %s, the rest unchanged",
				a.Partition, a.IdempotencyKey, b.Type, b.State, b.Attempts, a.Type, a.State, a.Attempts, want)
		}
	}
	if got := e.claim("w2", []string{"old"}, 2000, 10_000, 10); len(got) != 0 {
		t.Errorf("a runner of the old name claimed %v", keysOf(got))
	}
	if got := e.claim("w2", []string{"new"}, 2000, 10_000, 10); len(got) != 3 {
		t.Errorf("a runner of the new name claimed %v; want the 3 pending", keysOf(got))
	}
	if r, err := rn.RenameReactions(e.ctx, "old", "new"); err != nil || r != (store.ReactionRename{Leased: 1}) {
		t.Errorf("a second RenameReactions = %+v, %v; want nothing moved, 1 leased left", r, err)
	}
}

func testReactionConcurrentClaims(t *testing.T, open Opener) {
	e := newReactionEnv(t, open)
	e.touch("p")
	const total, claimers = 60, 6
	e.enqueue("p", newReactions("c", "mail", total, 100))
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		wg   sync.WaitGroup
	)
	for w := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for {
				got, err := e.rs.ClaimReactions(e.ctx, store.ReactionClaim{Owner: owner, Types: []string{"mail"}, NowMs: 1000,
					LeaseUntilMs: 100_000, Limit: 3})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					if prev, ok := seen[r.IdempotencyKey]; ok {
						t.Errorf("%s claimed by %s and %s", r.IdempotencyKey, prev, owner)
					}
					seen[r.IdempotencyKey] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != total {
		t.Errorf("claimed %d reactions of %d", len(seen), total)
	}
}
