package reactor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

// The runner against a real SQLite store; flakyStore injects failures of
// the lease renewal (the database unreachable from this runner).

type flakyStore struct {
	*sqlitestore.Store
	failExtend atomic.Bool
	extends    atomic.Int64
	// loseClaims > 0 makes that many claims fail after the store applied
	// them (an answer lost to a timeout after the commit).
	loseClaims atomic.Int64
}

func (f *flakyStore) ClaimReactions(ctx context.Context, c store.ReactionClaim) ([]store.Reaction, error) {
	rs, err := f.Store.ClaimReactions(ctx, c)
	if err == nil && len(rs) > 0 && f.loseClaims.Add(-1) >= 0 {
		return nil, errors.New("injected: the claim's answer was lost")
	}
	return rs, err
}

func (f *flakyStore) ExtendReactionLease(ctx context.Context, partition, key, owner string, untilMs int64) (bool, error) {
	f.extends.Add(1)
	if f.failExtend.Load() {
		return false, errors.New("injected: database unreachable")
	}
	return f.Store.ExtendReactionLease(ctx, partition, key, owner, untilMs)
}

func openStore(t *testing.T) *flakyStore {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &flakyStore{Store: s}
}

func enqueue(t *testing.T, s *flakyStore, keys ...string) {
	t.Helper()
	now := time.Now().UnixMilli()
	var rs []store.NewReaction
	for _, k := range keys {
		rs = append(rs, store.NewReaction{IdempotencyKey: k, Type: "job", Version: 1, Payload: []byte(`{"k":"` + k + `"}`),
			SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 1, CreatedAtMs: now, MaxAttempts: 3})
	}
	err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		return tx.(store.ReactionTx).EnqueueReactions(ctx, rs)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s *flakyStore, key string) store.Reaction {
	t.Helper()
	rs, err := s.ListReactions(context.Background(), store.ReactionQuery{Partition: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.IdempotencyKey == key {
			return r
		}
	}
	t.Fatalf("no reaction %s", key)
	return store.Reaction{}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newRunner(s *flakyStore, lease time.Duration, h reaction.Handler, tweak ...func(*reaction.Config)) *Runner {
	rc := reaction.Config{Handlers: map[string]reaction.Handler{"job": h}, Workers: 2, LeaseDuration: lease,
		PollInterval: 10 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	for _, f := range tweak {
		f(&rc)
	}
	return New(Config{Store: s, Reactions: rc, Owner: "test"})
}

func stop(t *testing.T, r *Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// A handler running for several lease durations keeps its lease (renewed
// every third of it) and completes at its first attempt. The lease is long
// enough that a renewal delayed by a loaded machine (CI runs this under
// -race beside the other packages: a 300 ms lease lost once to a 200 ms
// stall) still lands before the expiry margin.
func TestRenewalCarriesALongHandler(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	enqueue(t, s, "long")
	const lease = time.Second
	r := newRunner(s, lease, func(ctx context.Context, d *reaction.Delivery) error {
		select {
		case <-time.After(3 * lease):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("cancelled: %w", context.Cause(ctx))
		}
	})
	r.Start()
	defer stop(t, r)
	waitFor(t, "completion", func() bool { return get(t, s, "long").State == store.ReactionCompleted })
	if got := get(t, s, "long"); got.Attempts != 1 {
		t.Errorf("attempts %d; want 1", got.Attempts)
	}
	if n := s.extends.Load(); n < 3 {
		t.Errorf("%d renewals over 3 lease durations; want at least 3", n)
	}
}

// When renewals fail (this runner lost the database), the handler's
// context ends before the lease expires, so another runner taking the
// reaction over after the expiry never runs beside it; the outcome is not
// recorded, and the next claim after the expiry runs the reaction again.
func TestFailedRenewalsStopTheHandlerBeforeTheLeaseExpires(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	enqueue(t, s, "cut")
	const lease = 600 * time.Millisecond
	var (
		mu        sync.Mutex
		ended     []time.Time
		attempts  []int
		causes    []error
		firstDone = make(chan struct{})
	)
	r := newRunner(s, lease, func(ctx context.Context, d *reaction.Delivery) error {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if d.Attempt > 1 {
			return nil
		}
		s.failExtend.Store(true)
		<-ctx.Done()
		mu.Lock()
		ended, causes = append(ended, time.Now()), append(causes, context.Cause(ctx))
		mu.Unlock()
		close(firstDone)
		return ctx.Err()
	})
	r.Start()
	defer stop(t, r)
	<-firstDone
	held := get(t, s, "cut")
	if held.State != store.ReactionLeased || held.Attempts != 1 {
		t.Fatalf("after the cancelled attempt: %+v; want still leased (nothing recorded)", held)
	}
	mu.Lock()
	end, cause := ended[0], causes[0]
	mu.Unlock()
	if expiry := time.UnixMilli(held.LeaseExpiresAtMs); !end.Before(expiry) {
		t.Errorf("the handler ran until %v, past its lease's expiry %v", end, expiry)
	}
	if !errors.Is(cause, errLeaseLost) {
		t.Errorf("cancelled by %v; want the lost lease", cause)
	}
	s.failExtend.Store(false)
	waitFor(t, "the retry after the expiry", func() bool { return get(t, s, "cut").State == store.ReactionCompleted })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Errorf("attempts %v; want [1 2]", attempts)
	}
	waitFor(t, "the completion to be counted", func() bool { return r.Stats().Completed == 1 })
	if st := r.Stats(); st.LostLeases != 1 || st.Claimed != 2 {
		t.Errorf("stats %+v", st)
	}
}

// A handler past HandlerTimeout fails with reaction.handler_timeout and
// is retried.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	enqueue(t, s, "slow")
	var calls atomic.Int64
	r := newRunner(s, 5*time.Second, func(ctx context.Context, d *reaction.Delivery) error {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, func(c *reaction.Config) { c.HandlerTimeout = 50 * time.Millisecond })
	r.Start()
	defer stop(t, r)
	waitFor(t, "completion", func() bool { return get(t, s, "slow").State == store.ReactionCompleted })
	got := get(t, s, "slow")
	var f struct{ Code string }
	_ = json.Unmarshal(got.LastFailure, &f)
	if got.Attempts != 2 || f.Code != reaction.CodeHandlerTimeout {
		t.Errorf("%+v (%s); want completed at attempt 2 after a timeout", got, got.LastFailure)
	}
}

// Stop waits for the running handlers; when its context ends first, it
// cancels them, and their reactions are given back without an attempt
// counted.
func TestStopDrainsThenReleases(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	enqueue(t, s, "quick", "stuck")
	var started atomic.Int64
	r := newRunner(s, 5*time.Second, func(ctx context.Context, d *reaction.Delivery) error {
		started.Add(1)
		var p struct{ K string }
		_ = json.Unmarshal(d.Payload, &p)
		if p.K == "quick" {
			time.Sleep(200 * time.Millisecond)
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	})
	r.Start()
	waitFor(t, "both handlers to start", func() bool { return started.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v; want the deadline (a handler ignores nothing but its context)", err)
	}
	if got := get(t, s, "quick"); got.State != store.ReactionCompleted {
		t.Errorf("the quick handler was not drained: %+v", got)
	}
	waitFor(t, "the stuck reaction to be given back", func() bool { return get(t, s, "stuck").State == store.ReactionPending })
	if got := get(t, s, "stuck"); got.Attempts != 0 || got.LeaseOwner != "" {
		t.Errorf("released: %+v; want pending with no attempt counted", got)
	}
	waitFor(t, "the release to be counted", func() bool { return r.Stats().Released == 1 })
	if st := r.Stats(); st.Completed != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A handler that returns a nil *reaction.Error as its error (a typed
// nil, which is not a nil error) fails its attempt with the generic
// code and is retried; the runner does not crash on it.
func TestTypedNilErrorIsAFailure(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	enqueue(t, s, "typed-nil")
	var calls atomic.Int64
	r := newRunner(s, 5*time.Second, func(ctx context.Context, d *reaction.Delivery) error {
		if calls.Add(1) == 1 {
			var re *reaction.Error
			return re
		}
		return nil
	})
	r.Start()
	defer stop(t, r)
	waitFor(t, "completion", func() bool { return get(t, s, "typed-nil").State == store.ReactionCompleted })
	got := get(t, s, "typed-nil")
	var f struct{ Code string }
	_ = json.Unmarshal(got.LastFailure, &f)
	if got.Attempts != 2 || f.Code != reaction.CodeHandlerFailed {
		t.Errorf("%+v (%s); want completed at attempt 2 after a %s", got, got.LastFailure, reaction.CodeHandlerFailed)
	}
}

// A claim the store applied but whose answer was lost leases reactions to
// an owner that runs nothing. The runner gives them back: the reaction
// runs at once (not after the lease), at its first attempt, and a
// reaction allowed one attempt completes rather than dead-letter
// undelivered when the lease ends.
func TestLostClaimIsGivenBack(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	now := time.Now().UnixMilli()
	err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		return tx.(store.ReactionTx).EnqueueReactions(ctx, []store.NewReaction{{IdempotencyKey: "once", Type: "job", Version: 1,
			Payload: []byte(`{}`), SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 1, CreatedAtMs: now, MaxAttempts: 1}})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.loseClaims.Store(1)
	var calls atomic.Int64
	r := newRunner(s, time.Hour, func(ctx context.Context, d *reaction.Delivery) error {
		calls.Add(1)
		return nil
	})
	r.Start()
	defer stop(t, r)
	waitFor(t, "completion", func() bool { return get(t, s, "once").State == store.ReactionCompleted })
	if got := get(t, s, "once"); got.Attempts != 1 || calls.Load() != 1 || s.loseClaims.Load() >= 0 {
		t.Errorf("%+v after %d handler calls (claims left to lose %d); want completed at attempt 1 after a lost claim",
			got, calls.Load(), s.loseClaims.Load())
	}
}

// enqueueTyped stores reactions of typ created at createdAt.
func enqueueTyped(t *testing.T, s *flakyStore, typ string, createdAt int64, keys ...string) {
	t.Helper()
	var rs []store.NewReaction
	for _, k := range keys {
		rs = append(rs, store.NewReaction{IdempotencyKey: k, Type: typ, Version: 1, Payload: []byte(`{}`),
			SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 1, CreatedAtMs: createdAt, MaxAttempts: 3})
	}
	if err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		return tx.(store.ReactionTx).EnqueueReactions(ctx, rs)
	}); err != nil {
		t.Fatal(err)
	}
}

// A name whose handlers hang (a webhook endpoint that does not answer)
// never holds every worker while the runner has other names: older
// reactions of the slow name fill what they may, and a reaction of
// another name still runs at once instead of waiting out their
// handlers.
func TestSlowNameLeavesAWorkerToOthers(t *testing.T) {
	s := openStore(t)
	now := time.Now().UnixMilli()
	enqueueTyped(t, s, "slow", now-1000, "s1", "s2", "s3", "s4", "s5")
	enqueueTyped(t, s, "job", now, "j1")
	release := make(chan struct{})
	var slowRunning, slowMax atomic.Int64
	r := newRunner(s, 5*time.Second, func(ctx context.Context, d *reaction.Delivery) error { return nil }, func(rc *reaction.Config) {
		rc.Workers = 4
		rc.Handlers["slow"] = func(ctx context.Context, d *reaction.Delivery) error {
			n := slowRunning.Add(1)
			defer slowRunning.Add(-1)
			for m := slowMax.Load(); n > m && !slowMax.CompareAndSwap(m, n); m = slowMax.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
	})
	r.Start()
	deadline := time.Now().Add(3 * time.Second)
	for get(t, s, "j1").State != store.ReactionCompleted {
		if time.Now().After(deadline) {
			close(release)
			stop(t, r)
			t.Fatalf("the other name's reaction did not run in 3 s while %d slow handlers held the workers", slowMax.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := slowMax.Load(); n != 3 {
		t.Errorf("%d slow handlers at most; want 3 (every worker but one)", n)
	}
	close(release)
	waitFor(t, "every slow reaction completed", func() bool {
		for _, k := range []string{"s1", "s2", "s3", "s4", "s5"} {
			if get(t, s, k).State != store.ReactionCompleted {
				return false
			}
		}
		return true
	})
	stop(t, r)
}
