// Package reactor is the runner of durable reactions (§6.9): it claims due
// reactions of the handlers it has under a lease, runs them with bounded
// concurrency, renews the lease while a handler runs, and records the
// outcome (completed, retried after a backoff, dead letter) with the
// lease owner compared, so a runner that lost its lease changes nothing.
// It also prunes old terminal reactions.
package reactor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
)

// recordTimeout bounds a store call that records an outcome: it runs on a
// context of its own, so an outcome lands even while the runner stops.
const recordTimeout = 10 * time.Second

// prunePasses bounds the bounded deletes of one pruning round.
const (
	prunePasses = 100
	pruneBatch  = 1000
)

// Config configures a Runner.
type Config struct {
	Store store.ReactionStore
	// Reactions are the handlers and the tuning (with defaults applied).
	Reactions reaction.Config
	// Now is the clock in Unix milliseconds (lease expiries compare
	// clocks of every process: keep them synchronized).
	Now    func() int64
	Logger *slog.Logger
	// Owner names this process in lease-owner tokens.
	Owner string
}

// Stats are the runner's counters.
type Stats struct {
	// Claimed counts the attempts started; Completed, Retried and
	// DeadLettered their recorded outcomes; Released the leases given
	// back at a stop; LostLeases the attempts whose lease another runner
	// (or a claim settling it) took over before the outcome was recorded.
	Claimed, Completed, Retried, DeadLettered, Released, LostLeases int64
	// Running is the handlers running now.
	Running int64
}

// Runner delivers reactions. Start it once; Stop ends it.
type Runner struct {
	cfg   Config
	rc    reaction.Config
	types []string
	// nameCap bounds the handlers of one name running at once: every
	// worker but one when the runner has several names, so that a name
	// whose handlers hang (a webhook endpoint that does not answer)
	// leaves a worker to the others.
	nameCap int
	mu      sync.Mutex
	byName  map[string]int // running handlers by name

	wake  chan struct{} // a local commit planned reactions
	freed chan struct{} // a worker finished
	quit  chan struct{} // Stop: claim no more
	ended chan struct{} // the claim loop returned
	// hard is the parent of every handler context: Stop cancels it when
	// its own context ends before the handlers do.
	hard       context.Context
	cancelHard context.CancelCauseFunc
	workers    sync.WaitGroup
	stopOnce   sync.Once

	claimed, completed, retried, dead, released, lost, running atomic.Int64
}

// errStopping, errLeaseLost and errTimeout are the causes of a handler
// context's end.
var (
	errStopping  = errors.New("reaction runner stopping")
	errLeaseLost = errors.New("reaction lease lost")
	errTimeout   = errors.New("reaction handler timeout")
)

// New returns a runner for cfg.Reactions (whose defaults it applies).
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixMilli() }
	}
	rc := cfg.Reactions.WithDefaults()
	types := make([]string, 0, len(rc.Handlers))
	for name := range rc.Handlers {
		types = append(types, name)
	}
	slices.Sort(types)
	nameCap := rc.Workers
	if len(types) > 1 && nameCap > 1 {
		nameCap--
	}
	hard, cancel := context.WithCancelCause(context.Background())
	return &Runner{cfg: cfg, rc: rc, types: types, nameCap: nameCap, byName: map[string]int{}, wake: make(chan struct{}, 1),
		freed: make(chan struct{}, 1), quit: make(chan struct{}), ended: make(chan struct{}), hard: hard, cancelHard: cancel}
}

// Start runs the claim loop in a goroutine until Stop.
func (r *Runner) Start() { go r.loop() }

// Wake makes the runner look for due reactions now.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the runner's counters.
func (r *Runner) Stats() Stats {
	return Stats{Claimed: r.claimed.Load(), Completed: r.completed.Load(), Retried: r.retried.Load(),
		DeadLettered: r.dead.Load(), Released: r.released.Load(), LostLeases: r.lost.Load(), Running: r.running.Load()}
}

// stopGrace bounds how long Stop waits, once its context ended and the
// handlers' contexts are cancelled, for the handlers to return and give
// their leases back: the host closes the store after Stop, and a release
// still under way then would never land.
const stopGrace = 5 * time.Second

// Stop stops claiming and waits for the running handlers to finish. When
// ctx ends first, it cancels their contexts, waits (at most stopGrace)
// for the handlers that return to give their leases back, and returns
// ctx's error.
func (r *Runner) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.quit) })
	done := make(chan struct{})
	go func() {
		<-r.ended
		r.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
		r.cancelHard(errStopping)
		return nil
	case <-ctx.Done():
		r.cancelHard(errStopping)
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
		}
		return ctx.Err()
	}
}

func (r *Runner) loop() {
	defer close(r.ended)
	poll := time.NewTicker(r.rc.PollInterval)
	defer poll.Stop()
	var prune <-chan time.Time
	if r.rc.PruneInterval > 0 {
		t := time.NewTicker(r.rc.PruneInterval)
		defer t.Stop()
		prune = t.C
	}
	// drained: the last claim found fewer due reactions than it asked
	// for, so a handler finishing is no reason to claim again; a wake-up
	// (a local commit planned reactions) or the next poll is.
	drained := false
	for {
		select {
		case <-r.quit:
			return
		default:
		}
		if free := int64(r.rc.Workers) - r.running.Load(); free > 0 && !drained {
			more, err := r.claim(int(free))
			if err != nil {
				// The database fails: try again after a poll interval,
				// not at every wake-up.
				r.cfg.Logger.Warn("reaction claim failed", "err", err)
				select {
				case <-r.quit:
					return
				case <-time.After(r.rc.PollInterval):
				}
				continue
			}
			if more {
				continue // more may be due
			}
			drained = true
		}
		select {
		case <-r.quit:
			return
		case <-r.wake:
			drained = false
		case <-r.freed:
		case <-poll.C:
			drained = false
		case <-prune:
			r.prune()
		}
	}
}

// claim claims up to n due reactions of the names below their cap and
// starts a worker for each; more reports that it got all it asked for
// (more may be due).
func (r *Runner) claim(n int) (more bool, err error) {
	r.mu.Lock()
	types := make([]string, 0, len(r.types))
	for _, t := range r.types {
		if left := r.nameCap - r.byName[t]; left > 0 {
			types = append(types, t)
			// Each claimed row may be of any of the names: ask for no
			// more than the tightest of them may still take.
			n = min(n, left)
		}
	}
	r.mu.Unlock()
	if len(types) == 0 {
		return false, nil
	}
	owner := r.cfg.Owner + ":" + randomToken()
	now := r.cfg.Now()
	until := now + r.rc.LeaseDuration.Milliseconds()
	ctx, cancel := context.WithTimeout(r.hard, recordTimeout)
	defer cancel()
	rs, err := r.cfg.Store.ClaimReactions(ctx, store.ReactionClaim{Owner: owner, Types: types, NowMs: now,
		LeaseUntilMs: until, Limit: n})
	if err != nil {
		// The store may have applied the claim and lost only its answer:
		// give back what it may have leased (its owner token is this
		// claim's alone), so that those reactions neither wait out the
		// lease nor lose an attempt.
		rctx, rcancel := context.WithTimeout(r.hard, recordTimeout)
		defer rcancel()
		if _, rerr := r.cfg.Store.ReleaseClaim(rctx, owner, until, r.cfg.Now()); rerr != nil {
			r.cfg.Logger.Warn("reaction claim release failed", "err", rerr)
		}
		return false, err
	}
	for _, rx := range rs {
		r.mu.Lock()
		r.byName[rx.Type]++
		r.mu.Unlock()
		r.running.Add(1)
		r.claimed.Add(1)
		r.workers.Add(1)
		go r.work(rx, owner)
	}
	return len(rs) == n, nil
}

// work runs one attempt and records its outcome.
func (r *Runner) work(rx store.Reaction, owner string) {
	defer func() {
		r.mu.Lock()
		atCap := r.byName[rx.Type] >= r.nameCap
		r.byName[rx.Type]--
		r.mu.Unlock()
		r.running.Add(-1)
		r.workers.Done()
		if atCap {
			// The name's due reactions were left out of the last
			// claims: look again now.
			r.Wake()
			return
		}
		select {
		case r.freed <- struct{}{}:
		default:
		}
	}()
	log := func(level slog.Level, msg string, args ...any) {
		r.cfg.Logger.Log(context.Background(), level, msg, append([]any{"partition", rx.Partition, "reaction", rx.IdempotencyKey,
			"name", rx.Type, "attempt", rx.Attempts}, args...)...)
	}
	ctx, cancel := context.WithCancelCause(r.hard)
	defer cancel(nil)
	hctx := ctx
	if r.rc.HandlerTimeout > 0 {
		var cancelTimeout context.CancelFunc
		hctx, cancelTimeout = context.WithTimeoutCause(ctx, r.rc.HandlerTimeout, errTimeout)
		defer cancelTimeout()
	}
	event := func(typ, code string, retryAtMs int64) {
		ev := reaction.Event{Type: typ, Partition: rx.Partition, IdempotencyKey: rx.IdempotencyKey, Name: rx.Type,
			Attempt: rx.Attempts, Code: code, At: time.UnixMilli(r.cfg.Now())}
		if retryAtMs > 0 {
			ev.RetryAt = time.UnixMilli(retryAtMs)
		}
		reaction.Emit(r.rc.OnEvent, r.cfg.Logger, ev)
	}
	event(reaction.EventStarted, "", 0)
	guardDone := make(chan struct{})
	stopGuard := make(chan struct{})
	go func() {
		defer close(guardDone)
		r.guard(ctx, cancel, rx, owner, stopGuard, log)
	}()
	err := r.call(hctx, rx)
	close(stopGuard)
	<-guardDone
	cause := context.Cause(hctx)
	rec, cancelRec := context.WithTimeout(context.Background(), recordTimeout)
	defer cancelRec()
	var (
		ok   bool
		rerr error
	)
	switch {
	case err == nil:
		if ok, rerr = r.cfg.Store.CompleteReaction(rec, rx.Partition, rx.IdempotencyKey, owner, r.cfg.Now()); ok {
			r.completed.Add(1)
			event(reaction.EventCompleted, "", 0)
		}
	case errors.Is(cause, errLeaseLost):
		// Another runner may hold it now; an expired lease settles on
		// the next claim.
		r.lost.Add(1)
		log(slog.LevelWarn, "reaction handler cancelled: its lease was lost", "err", err)
		return
	case errors.Is(cause, errStopping):
		if ok, rerr = r.cfg.Store.ReleaseReaction(rec, rx.Partition, rx.IdempotencyKey, owner, r.cfg.Now()); ok {
			r.released.Add(1)
		}
	default:
		f := r.failure(err, cause, rx)
		if f.RetryAtMs == 0 {
			log(slog.LevelError, "reaction dead-lettered", "code", f.Code, "err", err)
		} else {
			log(slog.LevelWarn, "reaction failed; retrying", "code", f.Code, "err", err, "retryAtMs", f.RetryAtMs)
		}
		if ok, rerr = r.cfg.Store.FailReaction(rec, rx.Partition, rx.IdempotencyKey, owner, f); ok {
			if f.RetryAtMs == 0 {
				r.dead.Add(1)
				event(reaction.EventDeadLettered, f.Code, 0)
			} else {
				r.retried.Add(1)
				event(reaction.EventRetried, f.Code, f.RetryAtMs)
			}
		}
	}
	if rerr != nil {
		log(slog.LevelError, "reaction outcome not recorded; its lease will expire", "err", rerr)
		return
	}
	if !ok {
		r.lost.Add(1)
		log(slog.LevelWarn, "reaction outcome not recorded: another runner took its lease over")
	}
}

// call runs the handler; a panic is its error.
func (r *Runner) call(ctx context.Context, rx store.Reaction) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reaction handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	h := r.rc.Handlers[rx.Type]
	if h == nil {
		return reaction.Permanent("reaction.handler_missing", nil)
	}
	// The stored JSON is written again in the normalized form: a JSONB
	// column (Postgres) reorders keys and adds spaces, and a handler sees
	// the same bytes on every driver.
	payload, err := reaction.NormalizePayload(json.RawMessage(rx.Payload))
	if err != nil {
		payload = rx.Payload
	}
	return h(ctx, &reaction.Delivery{Partition: rx.Partition, IdempotencyKey: rx.IdempotencyKey, Name: rx.Type,
		Version: rx.Version, Payload: payload, Attempt: rx.Attempts, MaxAttempts: rx.MaxAttempts,
		SourceClientID: rx.SourceClientID, SourceClientCommitID: rx.SourceClientCommitID,
		SourceCommitSeq: rx.SourceCommitSeq, CreatedAt: time.UnixMilli(rx.CreatedAtMs)})
}

// failure classifies a failed attempt: its code and details, and when it
// is due again (0: a dead letter).
func (r *Runner) failure(err, cause error, rx store.Reaction) store.ReactionFailure {
	now := r.cfg.Now()
	f := store.ReactionFailure{Code: reaction.CodeHandlerFailed, AtMs: now}
	permanent := false
	var re *reaction.Error
	switch {
	case errors.As(err, &re) && re != nil: // a typed nil is a plain failure
		f.Code, f.Details, permanent = re.Code(), re.DetailsJSON(), re.IsPermanent()
	case errors.Is(cause, errTimeout):
		f.Code = reaction.CodeHandlerTimeout
	}
	if !permanent && rx.Attempts < rx.MaxAttempts {
		f.RetryAtMs = now + max(reaction.Backoff(rx.Attempts, r.rc.InitialBackoff, r.rc.MaxBackoff).Milliseconds(), 1)
	}
	return f
}

// guard renews the lease every third of its duration while the handler
// runs. It cancels the handler when the lease is gone (another runner
// holds it, or a claim settled it) or when no renewal landed and the
// expiry is near (a sixth of the lease away): past it another process may
// take the reaction over, and the handler must not run beside it.
func (r *Runner) guard(ctx context.Context, cancel context.CancelCauseFunc, rx store.Reaction, owner string,
	stop <-chan struct{}, log func(slog.Level, string, ...any)) {
	lease := r.rc.LeaseDuration.Milliseconds()
	margin := max(lease/6, 1)
	expiry := rx.LeaseExpiresAtMs
	untilDeadline := func() time.Duration { return time.Duration(expiry-margin-r.cfg.Now()) * time.Millisecond }
	deadline := time.NewTimer(untilDeadline())
	defer deadline.Stop()
	tick := time.NewTicker(r.rc.LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-deadline.C:
			cancel(errLeaseLost)
			return
		case <-tick.C:
		}
		sent := r.cfg.Now()
		rctx, rcancel := context.WithTimeout(ctx, min(r.rc.LeaseDuration/3, max(untilDeadline(), time.Millisecond)))
		ok, err := r.cfg.Store.ExtendReactionLease(rctx, rx.Partition, rx.IdempotencyKey, owner, sent+lease)
		rcancel()
		switch {
		case err == nil && ok:
			expiry = sent + lease
			deadline.Reset(untilDeadline())
		case err == nil:
			cancel(errLeaseLost)
			return
		case ctx.Err() != nil:
			return
		default:
			log(slog.LevelWarn, "reaction lease renewal failed", "err", err)
		}
	}
}

// prune deletes terminal reactions past their retention, in bounded
// passes.
func (r *Runner) prune() {
	now := r.cfg.Now()
	done := now - r.rc.CompletedRetention.Milliseconds()
	dead := now - r.rc.DeadRetention.Milliseconds()
	for range prunePasses {
		ctx, cancel := context.WithTimeout(r.hard, recordTimeout)
		c, d, err := r.cfg.Store.PruneReactions(ctx, done, dead, pruneBatch)
		cancel()
		if err != nil {
			r.cfg.Logger.Warn("reaction pruning failed", "err", err)
			return
		}
		more := c+d >= pruneBatch
		reaction.Emit(r.rc.OnEvent, r.cfg.Logger, reaction.Event{Type: reaction.EventPruneCompleted, At: time.UnixMilli(r.cfg.Now()),
			Prune: &reaction.PruneSummary{CompletedBefore: time.UnixMilli(done), DeadLetteredBefore: time.UnixMilli(dead),
				Completed: c, DeadLettered: d, Limit: pruneBatch, MayHaveMore: more}})
		if !more {
			return
		}
		select {
		case <-r.quit:
			return
		default:
		}
	}
}

// randomToken is a fresh opaque lease-owner suffix.
func randomToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
