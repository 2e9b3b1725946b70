package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/syncgo/syncgo/store"
)

// A write that finds the database full (SQLITE_FULL: here the page cap,
// on a disk the same code) fails with store.ErrStorageFull, and reads go
// on (issue 15, finding 10).
func TestWriteOnFullDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "full.db")
	s, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TouchPartition(context.Background(), "p0", 1, "e0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A cap below the current size is raised to it: the database is full.
	s, err = Open(context.Background(), Config{Path: path, MaxPageCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var werr error
	for i := 1; i < 100000 && werr == nil; i++ {
		_, werr = s.TouchPartition(context.Background(), "partition-with-a-long-name-"+strconv.Itoa(i), 1, "epoch")
	}
	if !errors.Is(werr, store.ErrStorageFull) {
		t.Fatalf("writes on a full database: %v, want store.ErrStorageFull", werr)
	}
	if _, err := s.Partition(context.Background(), "p0"); err != nil {
		t.Fatalf("a read on a full database: %v", err)
	}
}
