package realtime

import (
	"context"
	"slices"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/wire"
)

// Deltas never outlive the grant (§3.2, §3.3): a socket's registrations
// were resolved when they were installed (at connect, at a socket round's
// end), and are narrowed whenever the actor's scopes are resolved again:
//
//   - on every HTTP round of the same client (the engine reports the
//     round's resolution through Config.OnResolve, before the round
//     answers, so no delta of a scope its pull answered revoked follows);
//   - on a bounded interval for every socket (Config.ReresolveInterval);
//   - when the host revokes an actor now (Server.RevokeActor), on every
//     process of a fleet (the store's grant notifications).
//
// Narrowing intersects each registration's effective scopes with the new
// allowed scopes: a registration that loses a requested key, or all the
// values of one, is dropped; a failing resolver drops them all (fail
// closed). Registrations are never widened here: a pull over HTTP takes
// effect at the next connect (§8.1), a socket round at its end. When
// anything changed, the session is sent a catch-up wake and its deltas are
// suppressed until it acknowledges: the client pulls, and its pull answers
// the narrowed effective scopes or the revocation.

// roundSessionKey marks the context of a socket round with its session:
// the round installs its own resolution at its end, so the engine's report
// of it does not narrow that session again.
type roundSessionKey struct{}

// OnResolve narrows the registrations of the client's sockets to a fresh
// resolution of its scopes (ok is false when the resolver failed), begun
// at started.
func (h *Hub) OnResolve(ctx context.Context, auth engine.Auth, clientID string, allowed map[string][]string, ok bool, started time.Time) {
	p := h.part(auth.Partition, false)
	if p == nil {
		return
	}
	self, _ := ctx.Value(roundSessionKey{}).(*session)
	p.mu.Lock()
	mine := slices.Clone(p.byClient[clientID])
	p.mu.Unlock()
	for _, s := range mine {
		if s != self && s.auth.ActorID == auth.ActorID {
			s.applyGrant(allowed, ok, started)
		}
	}
}

// Reresolve resolves the scopes of every socket of an actor in a
// partition again and narrows their registrations; an empty actor means
// every socket of the partition, an empty partition every socket. It
// returns the number of sockets resolved.
func (h *Hub) Reresolve(ctx context.Context, partition, actorID string) int {
	var sessions []*session
	if partition == "" {
		sessions = h.allSessions()
	} else if p := h.part(partition, false); p != nil {
		sessions = h.sessionsOf(p)
	}
	if actorID != "" {
		sessions = slices.DeleteFunc(sessions, func(s *session) bool { return s.auth.ActorID != actorID })
	}
	ctx = h.prepareResolve(ctx, sessions)
	n := 0
	for _, s := range sessions {
		if ctx.Err() != nil {
			break
		}
		h.reresolveSession(ctx, s)
		n++
	}
	return n
}

// prepareResolve hands the sessions' actors to Config.PrepareResolve.
func (h *Hub) prepareResolve(ctx context.Context, sessions []*session) context.Context {
	if h.cfg.PrepareResolve == nil || len(sessions) == 0 {
		return ctx
	}
	actors := map[string][]string{}
	for _, s := range sessions {
		if !s.conn.isClosing() {
			actors[s.auth.Partition] = append(actors[s.auth.Partition], s.auth.ActorID)
		}
	}
	return h.cfg.PrepareResolve(ctx, actors)
}

// reresolveSession runs the resolver for one session and narrows it. The
// resolution counts as begun when the resolver started, or when what it
// returned was read, if earlier (a pass's read-ahead, engine.ReadAt).
func (h *Hub) reresolveSession(ctx context.Context, s *session) {
	if s.conn.isClosing() {
		return
	}
	clock := &engine.ResolveClock{}
	started := time.Now()
	allowed, err := h.cfg.Engine.ResolveAllowed(engine.WithResolveClock(ctx, clock), s.auth, s.clientID)
	if !clock.At.IsZero() && clock.At.Before(started) {
		started = clock.At
	}
	if err != nil && h.isClosed() {
		return // stopping: the sockets close anyway
	}
	if err != nil {
		h.cfg.Logger.Warn("realtime: scope resolver failed; dropping the socket's registrations",
			"partition", s.auth.Partition, "err", err)
	}
	s.applyGrant(allowed, err == nil, started)
}

// reresolveAll resolves the sessions' scopes again, a few at a time (the
// resolver may wait on the store), and returns when all are narrowed: at
// most reresolveTimeout, after which the sessions not yet resolved fail
// closed, or until the hub stops.
func (h *Hub) reresolveAll(sessions []*session) {
	ctx, cancel := context.WithTimeout(context.Background(), reresolveTimeout)
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	pctx := h.prepareResolve(ctx, sessions)
	inChunks(len(sessions), min(reresolveWorkers, len(sessions)), 8, func() func(lo, hi int) {
		return func(lo, hi int) {
			for _, s := range sessions[lo:hi] {
				h.reresolveSession(pctx, s)
			}
		}
	})
}

// reresolveWorkers is how many sessions reresolveAll resolves at once;
// reresolveTimeout bounds the whole pass.
const (
	reresolveWorkers = 8
	reresolveTimeout = 30 * time.Second
)

// reresolveLoop re-resolves every socket once per ReresolveInterval, until
// the hub stops; a pass that outlasts the interval delays the next.
func (h *Hub) reresolveLoop() {
	defer h.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.stop
		cancel()
	}()
	t := time.NewTicker(h.cfg.ReresolveInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.Reresolve(ctx, "", "")
		}
	}
}

// applyGrant narrows the registrations to allowed scopes (§3.2 rules 4
// and 5 on the registered effective scopes) and wakes the session when
// anything changed. A session still starting, or running a sync round,
// re-resolves once more when it installs registrations computed earlier.
func (s *session) applyGrant(allowed map[string][]string, ok bool, started time.Time) {
	p := s.part
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grant != nil && started.Before(s.grant.started) {
		// Stale: a resolution begun later was applied already (a
		// membership removed in between would come back).
		return
	}
	s.grantGen++
	s.grant = &grant{allowed: allowed, ok: ok, started: started}
	if s.starting {
		return // start narrows what it installs to this grant
	}
	regs, changed := narrowRegistrations(s.regs, allowed, ok)
	if !changed {
		return
	}
	s.installLocked(s.hub.newRegSet(regs, s.version, s.epoch))
	s.hub.stats.narrowed.Add(1)
	s.suppressed = true
	s.wakeLocked(wire.WakeCatchupRequired)
}

// grant is one resolution of an actor's allowed scopes.
type grant struct {
	allowed map[string][]string
	ok      bool
	// started is when the resolution began.
	started time.Time
}

// sinceLocked narrows registrations computed from a resolution made
// before grantGen was gen to the grants applied since. mu is held.
func (s *session) sinceLocked(gen uint64, rs regSet, epoch string) regSet {
	if s.grantGen == gen || s.grant == nil {
		return rs
	}
	regs, changed := narrowRegistrations(rs.regs, s.grant.allowed, s.grant.ok)
	if !changed {
		return rs
	}
	s.hub.stats.narrowed.Add(1)
	return s.hub.newRegSet(regs, rs.version, epoch)
}

// narrowRegistrations intersects registrations with allowed scopes.
func narrowRegistrations(regs []registration, allowed map[string][]string, ok bool) ([]registration, bool) {
	out := make([]registration, 0, len(regs))
	changed := false
	for _, r := range regs {
		eff, active := engine.EffectiveScopes(r.effective, allowed, ok)
		if !active {
			changed = true
			continue
		}
		if !sameScopeMap(eff, r.effective) {
			changed = true
			r.effective = eff
		}
		out = append(out, r)
	}
	return out, changed
}

func sameScopeMap(a, b wire.ScopeMap) bool {
	return slices.EqualFunc(a, b, func(x, y wire.ScopeValues) bool {
		return x.Key == y.Key && slices.Equal(x.Values, y.Values)
	})
}
