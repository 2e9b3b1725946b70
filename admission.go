package syncgo

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/syncerr"
)

// admission bounds the requests served at once. A request beyond the cap
// waits in a bounded queue for a bounded time; beyond that it is refused
// early, before any storage work, with sync.rate_limited, HTTP 503 and
// Retry-After: under a burst the server keeps serving at its pace instead
// of taking every request in at once (and a compressor, buffers and a
// storage connection for each).
type admission struct {
	slots     chan struct{}
	queued    atomic.Int64
	maxQueued int64
	wait      time.Duration
	retry     time.Duration

	// refusedFull and refusedWait count the requests refused because the
	// queue was full, or because their wait in it ran out.
	refusedFull, refusedWait atomic.Int64

	// releaser returns the process's free memory to the system after a
	// drained burst (nil: never).
	releaser *memfree.Releaser

	mu       sync.Mutex
	inFlight int
	peak     int
}

func newAdmission(max, maxQueued int, wait time.Duration, releaser *memfree.Releaser) *admission {
	if max <= 0 {
		return nil
	}
	return &admission{slots: make(chan struct{}, max), maxQueued: int64(maxQueued), wait: wait, retry: time.Second,
		releaser: releaser}
}

// acquire takes a slot, waiting in the queue if there is room in it. It
// returns a refusal when the queue is full or the wait ran out, and the
// context's error when the client went away meanwhile.
func (a *admission) acquire(ctx context.Context) (release func(), refusal error) {
	if a == nil {
		return func() {}, nil
	}
	select {
	case a.slots <- struct{}{}:
		return a.admitted(), nil
	default:
	}
	if a.queued.Add(1) > a.maxQueued {
		a.queued.Add(-1)
		a.refusedFull.Add(1)
		return nil, a.overloaded()
	}
	defer a.queued.Add(-1)
	timer := time.NewTimer(a.wait)
	defer timer.Stop()
	select {
	case a.slots <- struct{}{}:
		return a.admitted(), nil
	case <-timer.C:
		a.refusedWait.Add(1)
		return nil, a.overloaded()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *admission) admitted() func() {
	a.mu.Lock()
	a.inFlight++
	a.peak = max(a.peak, a.inFlight)
	a.mu.Unlock()
	var once sync.Once
	return func() { once.Do(a.release) }
}

// release frees a slot. When a burst that filled at least half the slots
// has drained, the releaser is asked to return the memory it used
// (compressors, request buffers) to the operating system: the pools are
// bounded, so what the burst allocated beyond them is garbage, but
// without allocation no collection would run to free it for minutes.
func (a *admission) release() {
	<-a.slots
	a.mu.Lock()
	a.inFlight--
	drained := a.inFlight == 0 && a.peak*2 >= cap(a.slots)
	if a.inFlight == 0 {
		a.peak = 0
	}
	a.mu.Unlock()
	if drained {
		a.releaser.Request(memfree.Requests)
	}
}

func (a *admission) overloaded() *syncerr.Error {
	ms := a.retryDelay().Milliseconds()
	return (&syncerr.Error{Code: syncerr.CodeRateLimited, Message: "the server is at capacity; retry later",
		HTTPStatus: http.StatusServiceUnavailable}).WithDetails(struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}{ms})
}

// retryAfter is the Retry-After header value of a refusal.
func (a *admission) retryAfter() string {
	return strconv.Itoa(max(1, int(a.retryDelay()/time.Second)))
}

// retryDelay is the wait a refusal asks for (nil: admission is off, and
// a refusal comes from elsewhere, as bodyMemory's: one second).
func (a *admission) retryDelay() time.Duration {
	if a == nil {
		return time.Second
	}
	return a.retry
}

// admissionStats is a snapshot of the admission control, for metrics.
type admissionStats struct {
	capacity, inFlight, queued int64
	refusedFull, refusedWait   int64
}

func (a *admission) stats() admissionStats {
	if a == nil {
		return admissionStats{}
	}
	a.mu.Lock()
	inFlight := a.inFlight
	a.mu.Unlock()
	return admissionStats{capacity: int64(cap(a.slots)), inFlight: int64(inFlight), queued: max(0, a.queued.Load()),
		refusedFull: a.refusedFull.Load(), refusedWait: a.refusedWait.Load()}
}
