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
// not one each), counted under the first one's reason.
func TestRequestsFoldWithinSpacing(t *testing.T) {
	const spacing = 300 * time.Millisecond
	var frees atomic.Int64
	r := New(spacing, func() { frees.Add(1) })
	r.Request("connections")
	waitFor(t, "first request", &frees, 1, time.Second)
	first := time.Now()
	r.Request("requests")
	r.Request("connections")
	r.Request("requests")
	waitFor(t, "requests within the spacing", &frees, 2, 3*spacing)
	if since := time.Since(first); since < spacing*3/4 {
		t.Errorf("the deferred release came %v after the first, before the spacing (%v)", since, spacing)
	}
	time.Sleep(2 * spacing)
	if n := frees.Load(); n != 2 {
		t.Errorf("%d releases, want 2: the requests within the spacing are one release", n)
	}
	if c, q := r.Released("connections"), r.Released("requests"); c != 1 || q != 1 {
		t.Errorf("released connections %d, requests %d; want 1 and 1", c, q)
	}
	// After the spacing, a request runs at once again.
	time.Sleep(spacing)
	r.Request("connections")
	waitFor(t, "a request after the spacing", &frees, 3, spacing/2)
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
