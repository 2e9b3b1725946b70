package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// testStore is a Store with the suite's test hooks: a second store on the
// same database (storetest.Reopener) and raw SQL (storetest.RawExecer).
type testStore struct{ *Store }

var (
	_ storetest.Reopener  = testStore{}
	_ storetest.RawExecer = testStore{}
)

// openPath opens a store on the database file at path and closes it with
// the test.
func openPath(t testing.TB, path string) testStore {
	t.Helper()
	return openConfig(t, Config{Path: path})
}

// openConfig opens a store with cfg and closes it with the test.
func openConfig(t testing.TB, cfg Config) testStore {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return testStore{s}
}

// openTest opens a store on a fresh file in the test's temp directory.
func openTest(t testing.TB) store.Store {
	t.Helper()
	return openPath(t, filepath.Join(t.TempDir(), "sync.db"))
}

// Reopen opens another store on the same database file, as another server
// process would.
func (s testStore) Reopen(t testing.TB) store.Store { return openPath(t, s.path) }

// ExecRaw runs a script on the writer, in its own savepoint: all of its
// statements or none. It may change the log: the writer drops its recent
// commits (recent.go), as for a write of another connection.
func (s testStore) ExecRaw(ctx context.Context, script string) error {
	return s.w.do(ctx, func(_ context.Context, c *conn) error {
		s.w.dropRecent = true
		c.forget()
		defer c.forget()
		return c.execScript(script)
	})
}

func TestConformance(t *testing.T) { storetest.Run(t, openTest) }

func BenchmarkAppend(b *testing.B) { storetest.BenchmarkAppend(b, openTest) }

func BenchmarkCommitWindow(b *testing.B) { storetest.BenchmarkCommitWindow(b, openTest) }

func BenchmarkScanPages(b *testing.B) { storetest.BenchmarkScanPages(b, openTest) }

func BenchmarkRequestEntry(b *testing.B) { storetest.BenchmarkRequestEntry(b, openTest) }

// BenchmarkPublishSegment is a bootstrap page's segment store write, as
// bytes and as a zstd body.
func BenchmarkPublishSegment(b *testing.B) { storetest.BenchmarkPublishSegment(b, openTest) }

func BenchmarkPushResultsPrune(b *testing.B) { storetest.BenchmarkPushResultsPrune(b, openTest) }
