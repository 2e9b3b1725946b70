package syncgo

import (
	"container/list"
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/syncerr"
)

// RateLimitConfig limits the rate of requests: POST /sync, socket rounds
// (§8.7) and POST /operations together, counted per actor and for the
// whole server. A request over either limit is refused after
// authentication and before any storage work with sync.rate_limited,
// HTTP 429 and a Retry-After header (on a socket, an ERROR frame in the
// round's response; on /operations an encoded error with Retry-After, as
// REMOTE.md answers every refusal after the body); the /sync refusal's
// details carry retryAfterMs, the wait until the limiter would admit it.
//
// A zero rate leaves that limit off. The per-actor limiters live in a
// bounded table (MaxActors, the least recently seen actor is forgotten
// first): memory stays bounded however many actors there are, at the price
// that an actor forgotten under that pressure starts again with a full
// burst.
type RateLimitConfig struct {
	// PerActor is the sustained rate of requests one actor (in one
	// partition) may make, and PerActorBurst how many it may make at once
	// (default: the rate rounded up, at least 1).
	PerActor      rate.Limit
	PerActorBurst int
	// Global is the sustained rate of requests of all actors together, and
	// GlobalBurst its burst (default: the rate rounded up, at least 1).
	Global      rate.Limit
	GlobalBurst int
	// MaxActors bounds the per-actor limiters kept. Default 100000.
	MaxActors int
}

// rateLimiter enforces a RateLimitConfig. A nil *rateLimiter admits all.
type rateLimiter struct {
	now func() time.Time

	global *rate.Limiter

	perActor      rate.Limit
	perActorBurst int
	maxActors     int

	// refusedActor and refusedGlobal count the requests refused by the
	// per-actor and the global limit.
	refusedActor, refusedGlobal atomic.Int64

	mu     sync.Mutex
	actors map[string]*list.Element // of *actorLimiter
	lru    list.List                // front: most recently seen
}

type actorLimiter struct {
	key string
	lim *rate.Limiter
}

func burstOf(r rate.Limit, b int) int {
	if b > 0 {
		return b
	}
	if r == rate.Inf {
		return 1
	}
	return max(1, int(math.Ceil(float64(r))))
}

func newRateLimiter(c *RateLimitConfig, now func() time.Time) *rateLimiter {
	if c == nil || (c.PerActor <= 0 && c.Global <= 0) {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	l := &rateLimiter{now: now, maxActors: c.MaxActors, actors: map[string]*list.Element{}}
	if l.maxActors <= 0 {
		l.maxActors = 100000
	}
	if c.Global > 0 {
		l.global = rate.NewLimiter(c.Global, burstOf(c.Global, c.GlobalBurst))
	}
	if c.PerActor > 0 {
		l.perActor, l.perActorBurst = c.PerActor, burstOf(c.PerActor, c.PerActorBurst)
	}
	return l
}

// actor returns the limiter of an actor, creating it (and forgetting the
// least recently seen actor when the table is full).
func (l *rateLimiter) actor(partition, actorID string) *rate.Limiter {
	key := partition + "\x00" + actorID
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.actors[key]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*actorLimiter).lim
	}
	for l.lru.Len() >= l.maxActors {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.actors, old.Value.(*actorLimiter).key)
	}
	a := &actorLimiter{key: key, lim: rate.NewLimiter(l.perActor, l.perActorBurst)}
	l.actors[key] = l.lru.PushFront(a)
	return a.lim
}

// refused returns the requests refused by the per-actor and the global
// limit.
func (l *rateLimiter) refused() (actor, global int64) {
	if l == nil {
		return 0, 0
	}
	return l.refusedActor.Load(), l.refusedGlobal.Load()
}

// actorCount is the number of per-actor limiters kept.
func (l *rateLimiter) actorCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// allow takes one request of the actor from its limiter and the global
// one. It returns nil, or the refusal and the wait after which the
// request would be admitted; a refused request takes nothing.
func (l *rateLimiter) allow(partition, actorID string) (*syncerr.Error, time.Duration) {
	if l == nil {
		return nil, 0
	}
	now := l.now()
	var mine *rate.Reservation
	if l.perActor > 0 {
		mine = l.actor(partition, actorID).ReserveN(now, 1)
		if d := mine.DelayFrom(now); d > 0 {
			mine.CancelAt(now)
			l.refusedActor.Add(1)
			return rateLimited(d, "too many requests from this actor; retry later"), d
		}
	}
	if l.global != nil {
		r := l.global.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			if mine != nil {
				mine.CancelAt(now)
			}
			l.refusedGlobal.Add(1)
			return rateLimited(d, "too many requests; retry later"), d
		}
	}
	return nil, 0
}

func rateLimited(wait time.Duration, msg string) *syncerr.Error {
	return (&syncerr.Error{Code: syncerr.CodeRateLimited, Message: msg,
		HTTPStatus: http.StatusTooManyRequests}).WithDetails(struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}{int64(math.Ceil(float64(wait) / float64(time.Millisecond)))})
}

// retryAfterSeconds is a Retry-After header value for a wait: whole
// seconds, rounded up, at least 1.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10)
}

// admitRound admits a socket round (§8.7): the actor's and the global
// rate first, then a slot under the concurrency cap.
func (s *Server) admitRound(ctx context.Context, auth engine.Auth) (release func(), refusal error) {
	if pe, _ := s.rates.allow(auth.Partition, auth.ActorID); pe != nil {
		return nil, pe
	}
	return s.admit.acquire(ctx)
}
