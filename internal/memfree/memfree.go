// Package memfree returns a process's free memory to the operating system
// after a burst of work, for every part of a server that asks, spaced by
// what the releases cost.
//
// A burst (a reconnect storm, a flood of requests) leaves garbage the
// runtime would collect and return only slowly when the process then goes
// quiet: without allocation no collection runs, and a forced one comes
// after two minutes. The parts of a server that see bursts end (the
// realtime hub's socket churn, the admission queue's drained requests)
// ask one Releaser, so that two bursts seen by two parts close together
// are released once, and a burst that ends soon after a release is
// released when the spacing has passed instead of being dropped.
package memfree

import (
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// The reasons a server asks for a release.
const (
	// Connections: a burst of connections opened and closed (sockets
	// and plain HTTP connections).
	Connections = "connections"
	// Requests: a burst of requests in flight at once has drained.
	Requests = "requests"
)

// Releaser runs release (two full collections, then every free page
// returned) when asked, spaced so that releases take about 5 % of
// the time at most: two releases are at least the minimum spacing apart,
// and at least costFactor times as long as the last release took. A nil
// *Releaser does nothing: a process that prefers the runtime's own pacing
// turns releases off by having none.
type Releaser struct {
	minSpacing time.Duration
	free       func()

	mu sync.Mutex
	// last is when the last release began, took how long it took (zero
	// while it runs), spent the total.
	last        time.Time
	took, spent time.Duration
	pending     *time.Timer
	// reasons are the reasons of the pending release's requests.
	reasons  []string
	released map[string]int64
	closed   bool
}

// costFactor: two releases are at least this many times the last one's
// duration apart.
const costFactor = 20

// release returns the free memory: a collection, then
// debug.FreeOSMemory's collection and the return of every free page. One
// collection moves what sync.Pools hold (net/http's per-connection read
// and write buffers among them) to their victim caches; the second frees
// it. After a 1,000-client reconnect storm the two leave RSS 41.9-42.5 MB
// where one left 50.9-53.7 MB (3 runs each, BENCHMARKS.md round
// thirty-three).
func release() {
	runtime.GC()
	debug.FreeOSMemory()
}

// New returns a Releaser whose releases are at least minSpacing apart.
// free replaces release (tests count calls with it); nil keeps it.
func New(minSpacing time.Duration, free func()) *Releaser {
	if free == nil {
		free = release
	}
	return &Releaser{minSpacing: minSpacing, free: free, released: map[string]int64{}}
}

// spacingLocked is the least time from the last release's start to the
// next one's.
func (r *Releaser) spacingLocked() time.Duration {
	return max(r.minSpacing, costFactor*r.took)
}

// retry is how long a deferred release waits again when its time came
// while the last release still ran.
func (r *Releaser) retry(wait time.Duration) time.Duration {
	return max(wait, r.minSpacing/4, time.Millisecond)
}

// Request asks for a release after a burst that ended, for reason (counted
// by Released). Outside the spacing since the last release it runs now, in
// a goroutine of its own; within it (or while the last one still runs),
// it runs once the spacing has passed, and every request meanwhile folds
// into that one.
func (r *Releaser) Request(reason string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.pending != nil {
		if !slices.Contains(r.reasons, reason) {
			r.reasons = append(r.reasons, reason)
		}
		return
	}
	r.reasons = append(r.reasons[:0], reason)
	now := time.Now()
	running := !r.last.IsZero() && r.took == 0
	if wait := r.spacingLocked() - now.Sub(r.last); wait > 0 || running {
		r.pending = time.AfterFunc(r.retry(wait), r.deferred)
		return
	}
	r.startLocked(now)
	go r.run(now)
}

// startLocked counts a release that begins now under its reasons.
func (r *Releaser) startLocked(now time.Time) {
	r.last, r.took = now, 0
	for _, reason := range r.reasons {
		r.released[reason]++
	}
	r.reasons = r.reasons[:0]
}

// run releases and records how long it took.
func (r *Releaser) run(began time.Time) {
	r.free()
	took := max(time.Since(began), time.Nanosecond)
	r.mu.Lock()
	r.took, r.spent = took, r.spent+took
	r.mu.Unlock()
}

// deferred is a release that waited for the spacing; if the last release
// is still running, or took long enough to need a longer spacing, it
// waits again.
func (r *Releaser) deferred() {
	r.mu.Lock()
	if r.closed || r.pending == nil {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if wait := r.spacingLocked() - now.Sub(r.last); wait > 0 || r.took == 0 {
		r.pending = time.AfterFunc(r.retry(wait), r.deferred)
		r.mu.Unlock()
		return
	}
	r.pending = nil
	r.startLocked(now)
	r.mu.Unlock()
	r.run(now)
}

// Released is how many releases were made for reason (a release that
// folded requests of several reasons counts under each of them).
func (r *Releaser) Released(reason string) int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released[reason]
}

// Spent is the time releases have taken in all.
func (r *Releaser) Spent() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spent
}

// Close drops a pending release; later requests do nothing.
func (r *Releaser) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.pending != nil {
		r.pending.Stop()
		r.pending = nil
	}
}
