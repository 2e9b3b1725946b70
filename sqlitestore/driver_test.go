package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// TestConnectionSettings: the writer is in WAL with the configured
// synchronous level and foreign keys off; read connections are query-only.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	var (
		mode     string
		sync, fk int64
	)
	err := s.w.do(t.Context(), func(_ context.Context, c *conn) error {
		if err := c.queryRowOnce("PRAGMA journal_mode", &mode); err != nil {
			return err
		}
		if err := c.queryRowOnce("PRAGMA synchronous", &sync); err != nil {
			return err
		}
		return c.queryRowOnce("PRAGMA foreign_keys", &fk)
	})
	if err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 || fk != 0 {
		t.Errorf("writer: journal_mode %q, synchronous %d, foreign_keys %d; want wal, 2 (FULL), 0", mode, sync, fk)
	}
	err = s.read(t.Context(), func(c *conn) error {
		return c.execOnce("CREATE TABLE read_conn_write(x)")
	})
	if err == nil {
		t.Error("a read connection created a table")
	}
}

// TestScanConnectionCache: the scan connections read through a page
// cache of scanCachePages pages and do not map the file; the read
// connections keep SQLite's default cache (BENCHMARKS.md, "Round
// sixteen", has why).
func TestScanConnectionCache(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	settings := func(read func(context.Context, func(*conn) error) error) (cache, mmap int64) {
		t.Helper()
		err := read(t.Context(), func(c *conn) error {
			if err := c.queryRowOnce("PRAGMA cache_size", &cache); err != nil {
				return err
			}
			return c.queryRowOnce("PRAGMA mmap_size", &mmap)
		})
		if err != nil {
			t.Fatal(err)
		}
		return cache, mmap
	}
	for range s.scanners.n {
		// Each connection of the pool in turn: readOn takes the one that
		// was given back longest ago.
		if cache, mmap := settings(s.scan); cache != scanCachePages || mmap != 0 {
			t.Errorf("scan connection: cache_size %d, mmap_size %d; want %d, 0", cache, mmap, scanCachePages)
		}
	}
	if cache, mmap := settings(s.read); cache == scanCachePages || mmap != 0 {
		t.Errorf("read connection: cache_size %d, mmap_size %d; want SQLite's default, 0", cache, mmap)
	}
}

// TestMemoryPath: a throw-away database runs with synchronous OFF and is
// removed on Close.
func TestMemoryPath(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	var sync int64
	err = s.w.do(t.Context(), func(_ context.Context, c *conn) error {
		return c.queryRowOnce("PRAGMA synchronous", &sync)
	})
	if err != nil || sync != 0 {
		t.Errorf("synchronous = %d, %v; want 0 (OFF)", sync, err)
	}
	dir := s.tempDir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory after Close: %v", err)
	}
}

func TestBadSynchronous(t *testing.T) {
	t.Parallel()
	if s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: "SOMETIMES"}); err == nil {
		s.Close()
		t.Fatal("Open accepted synchronous SOMETIMES")
	}
}

// TestClosed: every method reports store.ErrClosed after Close.
func TestClosed(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	ctx := t.Context()
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Row(ctx, "p", storetest.TableTasks, "t1"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Row after Close = %v", err)
	}
	if _, err := s.Partition(ctx, "p"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Partition after Close = %v", err)
	}
	if _, err := s.TouchPartition(ctx, "p", 1, "e"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("TouchPartition after Close = %v", err)
	}
	err := s.Write(ctx, "p", func(context.Context, store.WriteTx) error { return nil })
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
}

// TestReadCancelled: a read under a cancelled context fails with the
// context's error and leaves the connection usable.
func TestReadCancelled(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(t.Context(), storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Partition(ctx, "p"); !errors.Is(err, context.Canceled) {
		t.Errorf("Partition under a cancelled context = %v", err)
	}
	// A long statement interrupted by the cancellation.
	ctx, cancel = context.WithCancel(t.Context())
	err := s.read(ctx, func(c *conn) error {
		cancel()
		var n int64
		return c.queryRow(`WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r) SELECT count(*) FROM r`).Scan(&n)
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("interrupted read = %v", err)
	}
	for range s.cfg.ReadConns + 1 {
		if _, err := s.Partition(t.Context(), "p"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Partition after an interrupted read = %v", err)
		}
	}
}

// TestBlobNullAndEmpty: NULL and empty BLOB values read back as nil and
// as an empty non-nil slice.
func TestBlobNullAndEmpty(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	ctx := t.Context()
	sc := storetest.FixtureSchema(t)
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	nilCV := storetest.Task{ID: "t1", ProjectID: "p"}.RowWrite(t, 1)
	emptyCV := storetest.Task{ID: "t2", ProjectID: "p", Blob: []byte{}}.RowWrite(t, 1)
	emptyCV.ColumnVersions = []byte{}
	for _, w := range []store.RowWrite{nilCV, emptyCV} {
		storetest.ApplyUpsert(t, s, "p", w)
	}
	got1, err := s.Row(ctx, "p", storetest.TableTasks, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got1.ColumnVersions != nil {
		t.Errorf("NULL column versions read as %#v", got1.ColumnVersions)
	}
	got2, err := s.Row(ctx, "p", storetest.TableTasks, "t2")
	if err != nil {
		t.Fatal(err)
	}
	if got2.ColumnVersions == nil || len(got2.ColumnVersions) != 0 {
		t.Errorf("empty column versions read as %#v", got2.ColumnVersions)
	}
	if !bytes.Equal(got2.Payload, emptyCV.Payload) {
		t.Errorf("payload %x, want %x", got2.Payload, emptyCV.Payload)
	}
	var typ string
	err = s.read(ctx, func(c *conn) error {
		return c.queryRow(`SELECT typeof("blob") FROM tasks WHERE _sync_row_id='t2'`).Scan(&typ)
	})
	if err != nil || typ != "blob" {
		t.Errorf("typed empty bytes column: %q, %v; want blob", typ, err)
	}
}

// TestWindowChunkInline keeps the window query's inline LIMIT equal to
// windowChunk, which the chunk loop relies on.
func TestWindowChunkInline(t *testing.T) {
	if !strings.Contains(windowSQL, "LIMIT "+strconv.Itoa(windowChunk)+")") {
		t.Fatalf("windowSQL's LIMIT differs from windowChunk %d", windowChunk)
	}
	if !strings.Contains(windowOneSQL, "LIMIT 1 OFFSET "+strconv.Itoa(windowChunk-1)+")") {
		t.Fatalf("windowOneSQL's OFFSET differs from windowChunk-1 %d", windowChunk-1)
	}
	if !strings.Contains(windowOneFirstSQL, "LIMIT 1 OFFSET "+strconv.Itoa(windowFirstChunk-1)+")") {
		t.Fatalf("windowOneFirstSQL's OFFSET differs from windowFirstChunk-1 %d", windowFirstChunk-1)
	}
}

// TestWindowOnePlan pins the plan of the one-value window query on the
// bundled SQLite: the change-scope index walk drives, each candidate's
// commit and changes are equality probes, and no temporary b-tree sorts
// the rows (the query's cost must stay per candidate, not per log).
func TestWindowOnePlan(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	plan := queryPlan(t, s, windowOneSQL, "p", "tasks", "project_id", "a", int64(0), int64(10))
	all := strings.Join(plan, "\n")
	for _, want := range []string{
		"SEARCH s USING COVERING INDEX",
		"SEARCH c USING INDEX sqlite_autoindex_sync_commits_1 (partition=? AND commit_seq=?)",
		"SEARCH ch USING INDEX sync_changes_by_table (partition=? AND commit_seq=? AND tbl=?)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("plan lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "TEMP B-TREE") || !strings.HasPrefix(plan[0], "SEARCH s ") {
		t.Errorf("plan sorts or does not start from the change scopes:\n%s", all)
	}
}

// queryPlan returns the detail column of EXPLAIN QUERY PLAN for sql, one
// line per plan step, as the bundled SQLite plans it.
func queryPlan(t *testing.T, s testStore, sql string, args ...any) []string {
	t.Helper()
	var plan []string
	err := s.read(t.Context(), func(c *conn) error {
		r, err := c.query("EXPLAIN QUERY PLAN "+sql, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			plan = append(plan, r.st.ColumnText(3))
		}
		return r.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestWindowRangePlans pins the plans of the range read's statements on
// the bundled SQLite: the candidates are an index-only walk, and the
// commits and changes of a stretch are each one walk of the table's
// primary-key index in its order, with no temporary b-tree (a sort would
// hold every payload of the stretch) and no probe per commit.
func TestWindowRangePlans(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	plans := map[string][]string{}
	err := s.read(t.Context(), func(c *conn) error {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{windowCandSQL, []any{"p", "tasks", "project_id", "a", int64(0), int64(10)}},
			{rangeCommitsSQL, []any{"p", int64(1), int64(10)}},
			{rangeChangesSQL, []any{"p", int64(1), int64(10), "tasks"}},
		} {
			r, err := c.query("EXPLAIN QUERY PLAN "+q.sql, q.args...)
			if err != nil {
				return err
			}
			for r.Next() {
				plans[q.sql] = append(plans[q.sql], r.st.ColumnText(3))
			}
			if err := r.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for sql, want := range map[string]string{
		windowCandSQL:   "SEARCH sync_change_scopes USING COVERING INDEX sqlite_autoindex_sync_change_scopes_1 (partition=? AND tbl=? AND var=? AND value=? AND commit_seq>? AND commit_seq<?)",
		rangeCommitsSQL: "SEARCH sync_commits USING INDEX sqlite_autoindex_sync_commits_1 (partition=? AND commit_seq>? AND commit_seq<?)",
		rangeChangesSQL: "SEARCH sync_changes USING INDEX sqlite_autoindex_sync_changes_1 (partition=? AND commit_seq>? AND commit_seq<?)",
	} {
		if got := strings.Join(plans[sql], "\n"); got != want {
			t.Errorf("plan of\n%s\n= %q, want %q", sql, got, want)
		}
	}
	if !strings.Contains(windowCandSQL, "LIMIT "+strconv.Itoa(rangeChunk)) {
		t.Errorf("windowCandSQL's LIMIT differs from rangeChunk %d", rangeChunk)
	}
}

// The page boundary walks read the covering primary key of
// sync_row_scopes in row-id order: no table row, no sort (a sort would
// read every entry of the value before the first boundary).
func TestPageBoundariesPlan(t *testing.T) {
	t.Parallel()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{boundarySQL, []any{"p", "tasks", "project_id", "a", "", int64(9)}},
		{boundaryIDsSQL, []any{"p", "tasks", "project_id", "a", "", int64(10)}},
	} {
		plan := queryPlan(t, s, q.sql, q.args...)
		all := strings.Join(plan, "\n")
		if len(plan) != 1 || !strings.Contains(all, "SEARCH sync_row_scopes USING COVERING INDEX sqlite_autoindex_sync_row_scopes_1 (partition=? AND tbl=? AND var=? AND value=? AND row_id>?)") {
			t.Errorf("the boundary walk does not read the row scope key alone, in order:\n%s", all)
		}
	}
}

// TestReadPoolLastPutFirst: a read takes the connection put back last,
// so reads that do not overlap keep to one connection (and its page
// cache); overlapping reads still get connections of their own.
func TestReadPoolLastPutFirst(t *testing.T) {
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	ctx := context.Background()
	p := s.readers
	a, err := p.take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two overlapping takes got one connection")
	}
	p.put(a)
	p.put(b)
	for range 3 {
		c, err := p.take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c != b {
			t.Fatalf("take after b was put back last: another connection")
		}
		p.put(c)
	}
	seen := map[*conn]bool{}
	var held []*conn
	for range p.n {
		c, err := p.take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[c] = true
		held = append(held, c)
	}
	if len(seen) != p.n {
		t.Errorf("%d overlapping takes got %d connections", p.n, len(seen))
	}
	for _, c := range held {
		p.put(c)
	}
}
