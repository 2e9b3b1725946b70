package syncgo

import (
	"strconv"
	"testing"
)

// The per-actor limiters are bounded: many actors keep at most MaxActors,
// the most recently seen ones.
func TestRateLimiterBoundedActors(t *testing.T) {
	l := newRateLimiter(&RateLimitConfig{PerActor: 1, PerActorBurst: 1, MaxActors: 3}, nil)
	for i := range 1000 {
		if pe, _ := l.allow("p", "actor"+strconv.Itoa(i)); pe != nil {
			t.Fatalf("actor %d refused on its first request", i)
		}
	}
	if n := l.actorCount(); n != 3 {
		t.Fatalf("%d per-actor limiters kept, want 3", n)
	}
	// The most recent actor is still remembered: its second request is refused.
	if pe, _ := l.allow("p", "actor999"); pe == nil {
		t.Fatal("the most recent actor's limiter was forgotten")
	}
}
