package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

// touchCounter counts TouchPartition calls.
type touchCounter struct {
	store.Store
	touches atomic.Int64
}

func (c *touchCounter) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	c.touches.Add(1)
	return c.Store.TouchPartition(ctx, partition, nowMs, newEpoch)
}

// TestTouchOncePerInterval: when a partition's touch interval has passed,
// one of the requests that arrive together writes the touch and the
// others read the partition (many touches at once would queue on the
// registry row's lock, each with its own commit).
func TestTouchOncePerInterval(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: sqlitestore.MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counted := &touchCounter{Store: st}
	var now atomic.Int64
	now.Store(1_000_000)
	e := New(Config{Store: counted, Now: now.Load})
	ctx := context.Background()
	if _, err := e.touchPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		now.Add(e.cfg.Limits.TouchInterval.Milliseconds() + 1)
		before := counted.touches.Load()
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				if p, err := e.touchPartition(ctx, "p"); err != nil || p.LogEpoch == "" {
					t.Errorf("touchPartition = %+v, %v", p, err)
				}
			})
		}
		wg.Wait()
		if n := counted.touches.Load() - before; n != 1 {
			t.Errorf("round %d: %d touches for 32 concurrent requests after the interval, want 1", round, n)
		}
	}
}
