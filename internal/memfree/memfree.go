// Package memfree returns a process's free memory to the operating system
// after a burst of work, at most once per spacing, for every part of a
// server that asks.
//
// A burst (a reconnect storm, a flood of requests) leaves garbage the
// runtime would collect and return only slowly when the process then goes
// quiet: without allocation no collection runs, and a forced one comes
// after two minutes. The parts of a server that see bursts end (the
// realtime hub's socket churn, the admission queue's drained requests)
// ask one Releaser, so that two bursts seen by two parts are released
// once, and a burst that ends soon after a release is released when the
// spacing has passed instead of being dropped.
package memfree

import (
	"runtime/debug"
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

// Releaser runs debug.FreeOSMemory (a full collection, then every free
// page returned) when asked, at most once per spacing. A nil *Releaser
// does nothing: a process with a heap of many GiB, where a full collection
// costs more than it frees, turns releases off by having none.
type Releaser struct {
	spacing time.Duration
	free    func()

	mu      sync.Mutex
	last    time.Time
	pending *time.Timer
	// reason is the reason of the pending release: its first request's.
	reason   string
	released map[string]int64
	closed   bool
}

// New returns a Releaser that releases at most once per spacing. free
// replaces debug.FreeOSMemory (tests count calls with it); nil keeps it.
func New(spacing time.Duration, free func()) *Releaser {
	if free == nil {
		free = debug.FreeOSMemory
	}
	return &Releaser{spacing: spacing, free: free, released: map[string]int64{}}
}

// Request asks for a release after a burst that ended, for reason (counted
// by Released). Outside the spacing since the last release it runs now, in
// a goroutine of its own; within it, it runs once the spacing has passed,
// and every request meanwhile folds into that one.
func (r *Releaser) Request(reason string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.pending != nil {
		return
	}
	now := time.Now()
	if wait := r.spacing - now.Sub(r.last); wait > 0 {
		r.reason = reason
		r.pending = time.AfterFunc(wait, r.deferred)
		return
	}
	r.last = now
	r.released[reason]++
	go r.free()
}

// deferred is a release that waited for the spacing.
func (r *Releaser) deferred() {
	r.mu.Lock()
	if r.closed || r.pending == nil {
		r.mu.Unlock()
		return
	}
	r.pending, r.last = nil, time.Now()
	r.released[r.reason]++
	r.mu.Unlock()
	r.free()
}

// Released is how many releases were made for reason (a release that
// folded several requests counts under its first request's reason).
func (r *Releaser) Released(reason string) int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released[reason]
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
