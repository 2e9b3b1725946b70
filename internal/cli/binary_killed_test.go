package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

// Operator commands killed part-way (SIGKILL) or interrupted (SIGINT):
// what they leave, and what running them again does.

// killedStore opens the test's database with the store of its driver.
func killedStore(t *testing.T, db string) store.Store {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	if strings.HasPrefix(db, "postgres://") {
		st, err = pgstore.Open(ctx, pgstore.Config{URL: db})
	} else {
		st, err = sqlitestore.Open(ctx, sqlitestore.Config{Path: db})
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startCommand starts `bin args…` with its stdout read line by line into
// lines (closed at its end) and its stderr kept in the returned log.
func startCommand(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string, *binarytest.Log) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	errLog := &binarytest.Log{}
	cmd.Stderr = errLog
	must(t, cmd.Start())
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines, errLog
}

// epochState reads every partition's log epoch and the number of client
// records of the partitions.
func epochState(t *testing.T, db string, parts []string) (map[string]string, int) {
	t.Helper()
	ctx := context.Background()
	st := killedStore(t, db)
	defer st.Close()
	epochs := map[string]string{}
	clients := 0
	for _, p := range parts {
		part, err := st.Partition(ctx, p)
		if err != nil {
			t.Fatalf("partition %s: %v", p, err)
		}
		epochs[p] = part.LogEpoch
		if _, err := st.Client(ctx, p, "c-"+p); err == nil {
			clients++
		}
	}
	return epochs, clients
}

// `syncgo epoch rotate` of many partitions killed part-way rotates all
// of them or none: before, each partition was rotated in a transaction of
// its own, and a kill left some partitions of a restored database
// rotated and the others serving the restored log under their old epoch
// (their clients keeping rows the restore lost). Running it again
// rotates every partition, and its output is the truth.
func TestBinaryEpochRotateKilledRotatesAllOrNone(t *testing.T) {
	bin := binarytest.Build(t)
	t.Run("sqlite", func(t *testing.T) {
		testEpochRotateKilled(t, bin, filepath.Join(t.TempDir(), "restored.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		// A database of its own: the rotation refuses while other
		// sessions of the database are open.
		testEpochRotateKilled(t, bin, pgtest.Database(t, "h84_rotate"))
	})
}

func testEpochRotateKilled(t *testing.T, bin, db string) {
	const n = 1500
	ctx := context.Background()
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("p%04d", i)
	}
	seed := func(touch bool) {
		st := killedStore(t, db)
		defer st.Close()
		for _, p := range parts {
			if touch {
				if _, err := st.TouchPartition(ctx, p, 1000, "old-"+p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.BindClient(ctx, p, store.ClientRecord{ClientID: "c-" + p, ActorID: "a", WireVersion: 3, Cursor: 7, UpdatedAtMs: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	seed(true)
	// A run to its end, timed: the kills below fall in its span. Then the
	// client records again.
	start := time.Now()
	if _, stderr, code := binarytest.Run(t, bin, nil, "epoch", "rotate", "-db", db, "-yes"); code != 0 {
		t.Fatalf("rotate: exit %d: %s", code, stderr)
	}
	span := time.Since(start)
	seed(false)

	before, clients := epochState(t, db, parts)
	// The first run is killed at its first line of output (before: one
	// partition rotated), the others spread over a run's span.
	delays := []time.Duration{-1}
	for k := range 8 {
		delays = append(delays, span*time.Duration(k)/4)
	}
	for _, delay := range delays {
		cmd, lines, errLog := startCommand(t, bin, "epoch", "rotate", "-db", db, "-yes")
		printed := 0
		if delay < 0 {
			for line := range lines {
				if strings.HasPrefix(line, "partition ") {
					printed++
					break
				}
			}
		} else {
			time.Sleep(delay)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for line := range lines {
			if strings.HasPrefix(line, "partition ") {
				printed++
			}
		}
		after, left := epochState(t, db, parts)
		rotated := 0
		for _, p := range parts {
			if after[p] != before[p] {
				rotated++
			}
		}
		if rotated != 0 && rotated != n {
			t.Fatalf("rotation killed after %v (%d line(s) printed): %d of %d partitions rotated; want all or none\n%s", delay, printed, rotated, n, errLog)
		}
		if rotated == 0 && left != clients {
			t.Fatalf("rotation killed after %v rotated nothing but left %d of %d client records", delay, left, clients)
		}
		if rotated == n && left != 0 {
			t.Fatalf("rotation killed after %v rotated every partition but left %d client records", delay, left)
		}
		if printed > 0 && rotated == 0 {
			t.Fatalf("rotation killed after %v printed %d partition(s) rotated, none was", delay, printed)
		}
		t.Logf("killed after %v: %d line(s) printed, %d partitions rotated", delay, printed, rotated)
		before, clients = after, left
	}

	// Run to its end: every partition rotated, as it says.
	stdout, stderr, code := binarytest.Run(t, bin, nil, "epoch", "rotate", "-db", db, "-yes")
	if code != 0 || strings.Count(stdout, "log epoch") != n {
		t.Fatalf("rotate after the kills: exit %d, %d lines\n%s", code, strings.Count(stdout, "log epoch"), stderr)
	}
	after, left := epochState(t, db, parts)
	for _, p := range parts {
		if after[p] == before[p] || !strings.Contains(stdout, fmt.Sprintf("partition %q: log epoch %s -> %s\n", p, before[p], after[p])) {
			t.Fatalf("partition %s: epoch %s -> %s, not as printed", p, before[p], after[p])
		}
	}
	if left != 0 {
		t.Fatalf("%d client records left after the rotation", left)
	}
	if strings.HasSuffix(db, ".db") {
		sqliteIntegrity(t, db)
	}
}

// sqliteIntegrity runs PRAGMA integrity_check on a SQLite file.
func sqliteIntegrity(t *testing.T, path string) {
	t.Helper()
	conn, err := sqlite.OpenConn(path, sqlite.OpenReadOnly)
	must(t, err)
	defer conn.Close()
	var res []string
	must(t, sqlitex.ExecuteTransient(conn, "PRAGMA integrity_check", &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			res = append(res, stmt.ColumnText(0))
			return nil
		},
	}))
	if len(res) != 1 || res[0] != "ok" {
		t.Fatalf("PRAGMA integrity_check of %s: %q", path, res)
	}
}
