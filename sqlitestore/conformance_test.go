package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// openTest opens a store on a fresh file in the test's temp directory.
func openTest(t testing.TB) store.Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, openTest) }

func BenchmarkAppend(b *testing.B) { storetest.BenchmarkAppend(b, openTest) }
