package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"zombiezen.com/go/sqlite"
)

// writeSyscalls is the process's count of write system calls so far
// (/proc/self/io, syscw).
func writeSyscalls(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no syscw in /proc/self/io")
	return 0
}

// scatterRows writes rows rows whose keys spread over the table's pages,
// each in its own leaf as a push's new rows are, in one write of s.
func scatterRows(t *testing.T, s testStore, from, rows int) {
	t.Helper()
	err := s.w.do(t.Context(), func(_ context.Context, c *conn) error {
		if err := c.exec(`CREATE TABLE IF NOT EXISTS scatter(k TEXT PRIMARY KEY, v BLOB)`); err != nil {
			return err
		}
		for i := from; i < from+rows; i++ {
			k := fmt.Sprintf("%08x", uint32(i)*2654435761)
			if err := c.exec(`INSERT INTO scatter(k, v) VALUES (?, randomblob(600))`, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWALBufferGathersWrites: with synchronous FULL the writer's WAL
// frames reach the file in a few large writes, not two per frame: the
// same commits make at least four times fewer write system calls than
// with NoWALBuffer. Not parallel: it counts the whole process's calls.
func TestWALBufferGathersWrites(t *testing.T) {
	count := func(noBuffer bool) int64 {
		path := filepath.Join(t.TempDir(), "sync.db")
		s, err := Open(t.Context(), Config{Path: path, NoWALBuffer: noBuffer, IdleCheckpoint: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ts := testStore{s}
		scatterRows(t, ts, 0, 2000)
		before := writeSyscalls(t)
		for i := range 20 {
			scatterRows(t, ts, 2000+i*40, 40)
		}
		return writeSyscalls(t) - before
	}
	plain, gathered := count(true), count(false)
	t.Logf("write system calls for 20 commits of 40 scattered rows: %d as SQLite writes, %d gathered", plain, gathered)
	if gathered*4 > plain {
		t.Errorf("gathered WAL writes made %d write calls against %d: not gathered", gathered, plain)
	}
}

// TestWALBufferDurableFiles: after every acknowledged write, the database
// and WAL files as they are on disk (copied without the WAL index, as
// after a crash) open to every acknowledged row and pass an integrity
// check: through checkpoints and WAL restarts every 64 pages, and
// commits large enough to spill the page cache mid-transaction.
func TestWALBufferDurableFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sync.db")
	s, err := Open(t.Context(), Config{Path: path, WALAutocheckpoint: 64, IdleCheckpoint: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := testStore{s}
	rows := 0
	for i := range 24 {
		n := 30
		if i%8 == 5 {
			n = 6000 // ~4 MB: more than the writer's page cache holds
		}
		scatterRows(t, ts, rows, n)
		rows += n
		got, check, err := copiedFiles(t, path, "scatter")
		if err != nil || got != int64(rows) || check != "ok" {
			t.Fatalf("write %d: the files on disk hold %d rows (want %d), integrity %q, %v", i, got, rows, check, err)
		}
	}
}

// copiedFiles copies the database at path and its WAL (not the WAL
// index: as a crash leaves them) and returns the copy's row count of
// table and its integrity check.
func copiedFiles(t *testing.T, path, table string) (rows int64, check string, err error) {
	t.Helper()
	dir := t.TempDir()
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, path+suffix, filepath.Join(dir, "copy.db"+suffix))
	}
	sc, err := sqlite.OpenConn(filepath.Join(dir, "copy.db"), sqlite.OpenReadWrite)
	if err != nil {
		return 0, "", err
	}
	c := newConn(sc)
	defer c.close()
	if err = c.queryRowOnce("SELECT count(*) FROM "+table, &rows); err == nil {
		err = c.queryRowOnce("PRAGMA integrity_check", &check)
	}
	return rows, check, err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWALBufferPageSizes: through walVFS directly, at page sizes whose
// frames are smaller than the buffer, and 64 KiB pages whose frames are
// written past it, the files on disk after each commit open to every
// committed row; a transaction that rewrites the pages it wrote (an
// update of rows it inserted, past the page cache) included.
func TestWALBufferPageSizes(t *testing.T) {
	t.Parallel()
	if err := walVFS.register(); err != nil {
		t.Fatal(err)
	}
	for _, pageSize := range []int{1024, 4096, 65536} {
		t.Run(strconv.Itoa(pageSize), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.db")
			sc, err := sqlite.OpenConn(walURI(path), sqlite.OpenReadWrite|sqlite.OpenCreate|sqlite.OpenURI)
			if err != nil {
				t.Fatal(err)
			}
			c := newConn(sc)
			defer c.close()
			for _, p := range []string{"PRAGMA page_size=" + strconv.Itoa(pageSize), "PRAGMA journal_mode=WAL",
				"PRAGMA synchronous=FULL", "PRAGMA cache_size=50", "PRAGMA wal_autocheckpoint=200",
				"CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)"} {
				if err := c.execOnce(p); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
			}
			rows := int64(0)
			for i := range 12 {
				n := int64(40)
				if i%4 == 2 {
					n = 2000
				}
				script := "BEGIN; WITH RECURSIVE s(i) AS (SELECT " + strconv.FormatInt(rows, 10) + " UNION ALL SELECT i+1 FROM s WHERE i < " +
					strconv.FormatInt(rows+n-1, 10) + ") INSERT INTO t(k, v) SELECT i*7919 % 1000003, randomblob(300) FROM s;" +
					" UPDATE t SET v = randomblob(310) WHERE k % 3 = 0; COMMIT;"
				if err := c.execScript(script); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				rows += n
				got, check, err := copiedFiles(t, path, "t")
				if err != nil || got != rows || check != "ok" {
					t.Fatalf("commit %d: the copied files hold %d rows (want %d), integrity %q, %v", i, got, rows, check, err)
				}
			}
		})
	}
}

// TestWALBufferPathCharacters: a database whose path holds the characters
// a URI gives meaning to (%, ?, #, a space) opens through walVFS at that
// path, not another, and keeps what it wrote.
func TestWALBufferPathCharacters(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir %41 ?x=1 #frag")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sync%20.db")
	s, err := Open(t.Context(), Config{Path: path, IdleCheckpoint: -1})
	if err != nil {
		t.Fatal(err)
	}
	scatterRows(t, testStore{s}, 0, 50)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) == 0 || names[0] != "sync%20.db" {
		t.Fatalf("files in the database's directory: %q; want sync%%20.db", names)
	}
	s, err = Open(t.Context(), Config{Path: path, IdleCheckpoint: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := queryInt(t, s, `SELECT count(*) FROM scatter`); got != 50 {
		t.Fatalf("reopened: %d rows, want 50", got)
	}
}
