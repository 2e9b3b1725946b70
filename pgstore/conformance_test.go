package pgstore

import (
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// TestConformance runs the storage contract's suite, each test on a fresh
// Postgres schema.
func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, func(tb testing.TB) store.Store { return openStore(tb) })
}
