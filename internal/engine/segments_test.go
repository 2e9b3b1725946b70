package engine

import (
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// The in-process segment store passes the segment-store contract; its
// "other process" is the same store (it cannot be shared).
func TestMemorySegmentsContract(t *testing.T) {
	storetest.RunSegmentStore(t, func(tb testing.TB) (store.SegmentStore, func(testing.TB) store.SegmentStore) {
		return NewMemorySegments(64 << 20), nil
	})
}
