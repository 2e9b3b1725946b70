package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A waiter on a build that fails with its builder's cancellation builds
// again (another request's client went away, not its own); any other
// failure is shared with the waiters, and a success is kept.
func TestSharedCacheWaiterRebuildsCanceled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		firstErr  error
		wantV     string
		wantErr   error
		wantBuild bool // the waiter's own build ran
	}{
		{"canceled", context.Canceled, "second", nil, true},
		{"deadline", context.DeadlineExceeded, "second", nil, true},
		{"other", errors.New("disk on fire"), "", errors.New("disk on fire"), false},
		{"success", nil, "first", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c sharedCache[string, string]
			c.max = 8
			release, started := make(chan struct{}), make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := c.get("k", func() (string, error) {
					close(started)
					<-release
					if tc.firstErr != nil {
						return "", tc.firstErr
					}
					return "first", nil
				})
				if !errors.Is(err, tc.firstErr) || tc.firstErr == nil && v != "first" {
					t.Errorf("the builder got %q, %v; want its own outcome", v, err)
				}
			}()
			<-started
			built := false
			done := make(chan struct{})
			var (
				v   string
				err error
			)
			go func() {
				defer close(done)
				v, err = c.get("k", func() (string, error) { built = true; return "second", nil })
			}()
			for c.hits.Load() == 0 { // the waiter found the first build
				time.Sleep(time.Millisecond)
			}
			close(release)
			<-done
			wg.Wait()
			if v != tc.wantV || (err == nil) != (tc.wantErr == nil) || err != nil && err.Error() != tc.wantErr.Error() || built != tc.wantBuild {
				t.Fatalf("the waiter got %q, %v (built itself: %v); want %q, %v (%v)", v, err, built, tc.wantV, tc.wantErr, tc.wantBuild)
			}
		})
	}
}
