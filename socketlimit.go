package syncgo

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/syncgo/syncgo/syncerr"
)

// socketLimiter caps the open realtime sockets, per actor and in total
// (RealtimeConfig.MaxSockets, MaxSocketsPerActor). Its table holds only
// actors with an open socket, so it is bounded by the sockets open. A nil
// *socketLimiter admits all.
type socketLimiter struct {
	max, maxPerActor int

	// refusedTotal and refusedActor count the upgrades refused by the
	// total and the per-actor cap.
	refusedTotal, refusedActor atomic.Int64

	mu       sync.Mutex
	total    int
	perActor map[string]int
}

func newSocketLimiter(maxTotal, maxPerActor int) *socketLimiter {
	if maxTotal <= 0 && maxPerActor <= 0 {
		return nil
	}
	return &socketLimiter{max: maxTotal, maxPerActor: maxPerActor, perActor: map[string]int{}}
}

// acquire counts a socket of the actor, or refuses it with
// sync.websocket_connection_limit when a cap is reached. The release it
// returns may be called more than once; only the first counts.
func (l *socketLimiter) acquire(partition, actorID string) (release func(), refusal *syncerr.Error) {
	if l == nil {
		return func() {}, nil
	}
	key := partition + "\x00" + actorID
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		l.refusedTotal.Add(1)
		return nil, socketLimit("the server has as many realtime connections open as it allows")
	}
	if l.maxPerActor > 0 && l.perActor[key] >= l.maxPerActor {
		l.refusedActor.Add(1)
		return nil, socketLimit("this actor has as many realtime connections open as it is allowed")
	}
	l.total++
	l.perActor[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perActor[key]--; l.perActor[key] <= 0 {
				delete(l.perActor, key)
			}
		})
	}, nil
}

// refused returns the upgrades refused by the total and the per-actor
// cap.
func (l *socketLimiter) refused() (total, actor int64) {
	if l == nil {
		return 0, 0
	}
	return l.refusedTotal.Load(), l.refusedActor.Load()
}

func socketLimit(msg string) *syncerr.Error {
	return &syncerr.Error{Code: syncerr.CodeWebsocketConnectionLimit, Message: msg, HTTPStatus: http.StatusTooManyRequests}
}
