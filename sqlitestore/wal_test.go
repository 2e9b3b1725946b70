package sqlitestore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store/storetest"
)

// TestWALAutocheckpoint: the writer checkpoints the WAL once it holds
// Config.WALAutocheckpoint pages, and the WAL then restarts from its
// start, so its file stays near that size; with the default (8000
// pages) the same commits (about 5,000 pages) all stay in the WAL.
func TestWALAutocheckpoint(t *testing.T) {
	const commits = 300
	walSize := func(t *testing.T, pages int) int64 {
		path := filepath.Join(t.TempDir(), "sync.db")
		// Without idle checkpoints, which a loaded machine's gaps between
		// the commits could start.
		s := openWritten(t, Config{Path: path, WALAutocheckpoint: pages, IdleCheckpoint: -1}, commits)
		defer s.Close()
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	small := walSize(t, 32)
	def := walSize(t, 0)
	t.Logf("WAL after %d commits: %d bytes checkpointed every 32 pages, %d by default", commits, small, def)
	// A commit here writes a dozen pages: 32 pages and the commit that
	// crossed them fit in 64 frames of 4 KiB (twice that for slack);
	// SQLite's own 1000 pages would be 4 MiB.
	if small > 128*(4096+24)+32 {
		t.Errorf("WAL of %d bytes with checkpoints every 32 pages: the writer did not checkpoint or the WAL did not restart", small)
	}
	// SQLite's own default, 1000 pages, would have checkpointed these
	// and kept the WAL near 1000 frames.
	if def <= 2000*(4096+24)+32 {
		t.Errorf("WAL of %d bytes by default: the default checkpoints at SQLite's 1000 pages or sooner", def)
	}
}

// TestIdleCheckpoint: once the writer has been idle a moment, the WAL is
// copied back into the database file, all of it (no read holds any of it
// back here), so the next write starts the WAL over. Without the idle
// checkpoint the burst stays in the WAL (8,000 pages hold it).
func TestIdleCheckpoint(t *testing.T) {
	s := openWritten(t, Config{Path: filepath.Join(t.TempDir(), "sync.db")}, 150)
	defer s.Close()
	runs := s.w.ck.runs.Load()
	deadline := time.Now().Add(5 * time.Second)
	for s.w.ck.runs.Load() == runs || s.w.ck.copied.Load() < s.w.ck.frames.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("no idle checkpoint copied the WAL within 5 s of the writer's last commit (runs %d, last %d of %d frames)",
				s.w.ck.runs.Load(), s.w.ck.copied.Load(), s.w.ck.frames.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	frames := s.w.ck.frames.Load()
	t.Logf("idle checkpoint: %d of %d frames copied", s.w.ck.copied.Load(), frames)
	// 150 commits of a dozen pages each, less any copied by a checkpoint
	// in a gap between them.
	if frames == 0 {
		t.Errorf("the idle checkpoint found an empty WAL")
	}
}

// openWritten opens a store with cfg and pushes commits one-row commits
// into it, one at a time, each its own group commit.
func openWritten(t *testing.T, cfg Config, commits int) *Store {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := storetest.FixtureSchema(t)
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TouchPartition(ctx, "p", 1000, "epoch-wal"); err != nil {
		t.Fatal(err)
	}
	for n := range commits {
		id := fmt.Sprintf("%016x", uint64(n+1)*0x9e3779b97f4a7c15)
		r := storetest.Task{ID: id, ProjectID: "p1", Title: ptr("a row")}.RowWrite(t, 1)
		if err := pushNewRow(ctx, s, "p", "client", fmt.Sprintf("c%d", n), r, sc.Version()); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
