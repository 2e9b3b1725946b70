package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
)

// TestWriteAnsweredAcrossClose: Close while writes keep arriving (a
// server shutting down with pushes in flight) answers every Write, with
// its batch's result or ErrClosed, and never leaves one waiting for ever
// for a writer that has stopped. Sixteen writers race Close, a hundred
// and fifty times; Close comes 2 ms after they start: the race needs
// writes in flight, not a condition to wait for.
func TestWriteAnsweredAcrossClose(t *testing.T) {
	ctx := context.Background()
	for it := range 150 {
		s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			otherErr error
		)
		for range 16 {
			wg.Go(func() {
				for {
					err := s.Write(ctx, "p", func(context.Context, store.WriteTx) error { return nil })
					if err == nil {
						continue
					}
					if !errors.Is(err, store.ErrClosed) {
						mu.Lock()
						otherErr = err
						mu.Unlock()
					}
					return
				}
			})
		}
		time.Sleep(2 * time.Millisecond)
		_ = s.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a Write is still waiting 10s after Close returned", it)
		}
		if otherErr != nil {
			t.Fatalf("round %d: a Write failed with %v, want ErrClosed", it, otherErr)
		}
	}
}
