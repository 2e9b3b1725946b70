package realtime

import (
	"fmt"
	"sync"
	"testing"
)

// TestInChunks: every index of [0, n) is run exactly once, by at most the
// workers' goroutines, whatever n: in chunks of at most the size, or in
// one go by a single worker.
func TestInChunks(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		for _, n := range []int{0, 1, 31, 32, 33, 1000, 1001} {
			t.Run(fmt.Sprintf("workers=%d/n=%d", workers, n), func(t *testing.T) {
				var mu sync.Mutex
				seen := make([]int, n)
				made := 0
				inChunks(n, workers, 32, func() func(lo, hi int) {
					mu.Lock()
					made++
					mu.Unlock()
					return func(lo, hi int) {
						if (workers > 1 && hi-lo > 32) || hi <= lo {
							t.Errorf("chunk [%d, %d)", lo, hi)
						}
						mu.Lock()
						defer mu.Unlock()
						for i := lo; i < hi; i++ {
							seen[i]++
						}
					}
				})
				for i, c := range seen {
					if c != 1 {
						t.Fatalf("index %d ran %d times", i, c)
					}
				}
				if made > workers {
					t.Errorf("%d workers made, want at most %d", made, workers)
				}
			})
		}
	}
}
