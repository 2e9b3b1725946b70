package memfree

import (
	"sync/atomic"
	"testing"
	"time"
)

func waitFor(t *testing.T, what string, n *atomic.Int64, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for n.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d releases after %v, want %d", what, n.Load(), within, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A first request releases at once; requests within the spacing, of any
// reason, fold into one release when the spacing has passed (not dropped,
// not one each), counted under each reason that asked for it.
func TestRequestsFoldWithinSpacing(t *testing.T) {
	const spacing = 300 * time.Millisecond
	var frees atomic.Int64
	var starts [2]time.Time
	r := New(spacing, func() {
		if n := frees.Load(); n < 2 {
			starts[n] = time.Now()
		}
		frees.Add(1)
	})
	r.Request("connections")
	waitFor(t, "first request", &frees, 1, time.Second)
	r.Request("requests")
	r.Request("connections")
	r.Request("requests")
	waitFor(t, "requests within the spacing", &frees, 2, 3*time.Second)
	// The first release's own start is at most its scheduling later than
	// the time the spacing counts from; a tenth of the spacing allows it.
	if gap := starts[1].Sub(starts[0]); gap < spacing*9/10 {
		t.Errorf("the deferred release began %v after the first, before the spacing (%v)", gap, spacing)
	}
	time.Sleep(2 * spacing)
	if n := frees.Load(); n != 2 {
		t.Errorf("%d releases, want 2: the requests within the spacing are one release", n)
	}
	if c, q := r.Released("connections"), r.Released("requests"); c != 2 || q != 1 {
		t.Errorf("released connections %d, requests %d; want 2 and 1", c, q)
	}
	// After the spacing, a request runs at once again, not deferred.
	time.Sleep(spacing)
	r.Request("connections")
	r.mu.Lock()
	deferred := r.pending != nil
	r.mu.Unlock()
	if deferred {
		t.Error("a request after the spacing was deferred")
	}
	waitFor(t, "a request after the spacing", &frees, 3, 2*time.Second)
}

// Close drops a pending release; a nil Releaser does nothing.
func TestCloseAndNil(t *testing.T) {
	var frees atomic.Int64
	r := New(100*time.Millisecond, func() { frees.Add(1) })
	r.Request("a")
	waitFor(t, "first request", &frees, 1, time.Second)
	r.Request("a")
	r.Close()
	r.Request("a")
	time.Sleep(300 * time.Millisecond)
	if n := frees.Load(); n != 1 {
		t.Errorf("%d releases after Close, want 1", n)
	}
	var none *Releaser
	none.Request("a")
	none.Close()
	if none.Released("a") != 0 {
		t.Error("a nil Releaser counted a release")
	}
}

// The spacing grows with what a release costs: at least costFactor times
// the last release's duration, however short the minimum; a request
// while a release still runs waits for it too. Spent adds the durations.
func TestSpacingFollowsCost(t *testing.T) {
	const took = 5 * time.Millisecond
	var frees atomic.Int64
	var starts [2]time.Time
	r := New(10*time.Millisecond, func() {
		if n := frees.Load(); n < 2 {
			starts[n] = time.Now()
		}
		time.Sleep(took)
		frees.Add(1)
	})
	r.Request("a")
	r.Request("a") // while the first runs: deferred, not a second at once
	waitFor(t, "both requests", &frees, 2, 4*time.Second)
	// The second begins at least costFactor times the first's duration
	// (itself at least took) after the first began.
	if gap := starts[1].Sub(starts[0]); gap < costFactor*took {
		t.Errorf("the deferred release began %v after the first, before %v", gap, costFactor*took)
	}
	if s := r.Spent(); s < 2*took {
		t.Errorf("spent %v in two releases of at least %v each", s, took)
	}
}
