package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/cli"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/producer"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Operator commands killed part-way (SIGKILL) or interrupted (SIGINT):
// what they leave, and what running them again does.

// killStep is the step through the points at which the tests below kill
// a command: every point, or every third with -short.
func killStep() int {
	if testing.Short() {
		return 3
	}
	return 1
}

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
		testEpochRotateKilled(t, bin, pgtest.Database(t, "cli_rotate_killed"))
	})
}

func testEpochRotateKilled(t *testing.T, bin, db string) {
	const n = 1000
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
	for k := 0; k < 8; k += killStep() {
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

	// Interrupted (SIGINT) at the same points: it rotates all and says
	// so (exit 0), or rotates none and says that (exit 1).
	for i := 2; i < len(delays); i += 2 {
		delay := delays[i]
		cmd, lines, errLog := startCommand(t, bin, "epoch", "rotate", "-db", db, "-yes")
		time.Sleep(delay)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		printed := 0
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
		code := cmd.ProcessState.ExitCode()
		switch {
		case code == 0 && rotated == n && printed == n && left == 0:
		case code == 1 && rotated == 0 && printed == 0 && strings.Contains(errLog.String(), "nothing rotated"):
		case code == -1 && rotated == 0 && printed == 0: // signalled before Go's handler was installed
		default:
			t.Fatalf("rotation interrupted after %v: exit %d, %d line(s) printed, %d of %d partitions rotated, %d client records left\n%s", delay, code, printed, rotated, n, left, errLog)
		}
		t.Logf("interrupted after %v: exit %d, %d partitions rotated", delay, code, rotated)
		before = after
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

// commitLog reads the default partition's commit log: its sequences in
// order and how many times each client_id/client_commit_id is in it.
func commitLog(t *testing.T, db string) ([]int64, map[string]int) {
	t.Helper()
	const q = `SELECT commit_seq, client_id, client_commit_id FROM sync_commits WHERE partition = 'default' ORDER BY commit_seq`
	var seqs []int64
	ids := map[string]int{}
	if strings.HasPrefix(db, "postgres://") {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, db)
		must(t, err)
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, q)
		must(t, err)
		for rows.Next() {
			var seq int64
			var client, id string
			must(t, rows.Scan(&seq, &client, &id))
			seqs = append(seqs, seq)
			ids[client+"/"+id]++
		}
		must(t, rows.Err())
		return seqs, ids
	}
	conn, err := sqlite.OpenConn(db, sqlite.OpenReadOnly)
	must(t, err)
	defer conn.Close()
	must(t, sqlitex.ExecuteTransient(conn, q, &sqlitex.ExecOptions{
		ResultFunc: func(stmt *sqlite.Stmt) error {
			seqs = append(seqs, stmt.ColumnInt64(0))
			ids[stmt.ColumnText(1)+"/"+stmt.ColumnText(2)]++
			return nil
		},
	}))
	return seqs, ids
}

// settledCount is count() once it stopped changing: the server may still
// be committing a request whose client was killed.
func settledCount(count func() int) int {
	n := count()
	for {
		time.Sleep(300 * time.Millisecond)
		m := count()
		if m == n {
			return n
		}
		n = m
	}
}

// checkDense fails unless seqs run from their first without a gap and
// every commit id is in the log once.
func checkDense(t *testing.T, seqs []int64, ids map[string]int) {
	t.Helper()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("the commit log has a gap: %d then %d", seqs[i-1], seqs[i])
		}
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("commit %s is in the log %d times", id, n)
		}
	}
}

// `syncgo import` killed (SIGKILL) at points spread over its run, while
// another writer pushes to the same server: the server keeps serving,
// running the import again writes what is left and counts the commits
// the killed runs wrote as cached, the commit log stays dense with every
// acknowledged push once, and the table exports as the input.
func TestBinaryImportKilledUnderLoad(t *testing.T) {
	bin := binarytest.Build(t)
	t.Run("sqlite", func(t *testing.T) {
		testImportKilled(t, bin, filepath.Join(t.TempDir(), "s.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		testImportKilled(t, bin, pgtest.Schema(t, "cli_import_killed", false))
	})
}

func testImportKilled(t *testing.T, bin, db string) {
	dir := t.TempDir()
	schemaPath, sc := writeSchema(t, dir, importSchema)
	const rows, batch = 2000, 20
	const commits = rows / batch
	var input strings.Builder
	for i := range rows {
		fmt.Fprintf(&input, `{"id":"i%04d","project_id":"p1","n":%d,"f":null,"ok":true,"meta":{"i":%d},"raw":null}`+"\n", i, i, i)
	}
	file := filepath.Join(dir, "items.jsonl")
	must(t, os.WriteFile(file, []byte(input.String()), 0o600))

	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", db)
	reader, err := sspclient.New(p.URL, "reader", sc, sspclient.Options{})
	must(t, err)
	must(t, reader.Subscribe("all", "items", map[string][]string{"project_id": {"p1"}}))
	if _, err := reader.SyncUntilQuiet(context.Background(), 20); err != nil {
		t.Fatal(err)
	}

	// The other writer: one-row commits until stopped, each
	// acknowledged one recorded.
	ctx, stopPush := context.WithCancel(context.Background())
	pushed := make(chan []string, 1)
	go func() {
		var acked []string
		defer func() { pushed <- acked }()
		pr, err := producer.New(producer.Config{URL: p.URL, Schema: sc, ClientID: "pusher",
			Token: func(context.Context) (string, error) { return "pusher", nil }})
		if err != nil {
			return
		}
		for n := 0; ctx.Err() == nil; n++ {
			id := fmt.Sprintf("push-%d", n)
			res, err := pr.Push(ctx, id, producer.Upsert("items", map[string]any{"id": fmt.Sprintf("q%05d", n), "project_id": "p1", "n": n, "f": nil, "ok": true, "meta": nil, "raw": nil}))
			if err == nil && (res.Status == wire.PushApplied || res.Status == wire.PushCached) {
				acked = append(acked, id)
			} else if n < 3 {
				t.Logf("push %s: %v %+v", id, err, res)
			}
		}
	}()

	env := []string{"SYNCGO_IMPORT_TOKEN=loader"}
	args := []string{"import", "-url", p.URL, "-schema", schemaPath, "-table", "items", "-id", "load", "-batch", fmt.Sprint(batch), file}
	imported := func() int {
		return settledCount(func() int {
			_, ids := commitLog(t, db)
			n := 0
			for id := range ids {
				if strings.HasPrefix(id, "syncgo-import/load-") {
					n++
				}
			}
			return n
		})
	}
	last := 0
	for i, delay := range []time.Duration{50, 150, 300, 450, 600, 800} {
		if i%killStep() != 0 {
			continue
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		must(t, cmd.Start())
		time.Sleep(delay * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		n := imported()
		if n < last || n > commits {
			t.Fatalf("after a kill at %d ms: %d import commits in the log (before: %d)", delay, n, last)
		}
		last = n
		t.Logf("killed at %d ms: %d of %d import commits written", delay, n, commits)
	}
	out, errOut, code := binarytest.Run(t, bin, env, args...)
	want := fmt.Sprintf("imported %d rows into items in %d commits: %d applied, %d cached (already imported), 0 rejected", rows, commits, commits-last, last)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("import after the kills: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
	stopPush()
	acked := <-pushed
	if len(acked) == 0 {
		t.Fatal("the other writer had no push acknowledged")
	}

	seqs, ids := commitLog(t, db)
	checkDense(t, seqs, ids)
	for _, id := range acked {
		if ids["pusher/"+id] != 1 {
			t.Fatalf("acknowledged push %s is in the log %d times", id, ids["pusher/"+id])
		}
	}
	if n := imported(); n != commits {
		t.Fatalf("%d import commits in the log; want %d", n, commits)
	}
	if strings.HasSuffix(db, ".db") {
		sqliteIntegrity(t, db)
	}

	// The reader that synced before syncs the rest, and the table exports
	// as the input (the other writer's rows aside).
	if _, err := reader.SyncUntilQuiet(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "out.jsonl")
	if _, errOut, code := binarytest.Run(t, bin, nil, "export", "-db", db, "-schema", schemaPath, "-partition", "default", "-table", "items", "-out", target); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	written, err := os.ReadFile(target)
	must(t, err)
	var got strings.Builder
	others := 0
	for _, line := range strings.Split(string(written), "\n") {
		if strings.HasPrefix(line, `{"id":"i`) {
			got.WriteString(line + "\n")
		} else if line != "" {
			others++
		}
	}
	if got.String() != input.String() {
		t.Fatalf("the exported rows differ from the input (%d bytes; want %d)", got.Len(), input.Len())
	}
	if n := len(reader.Rows("items")); n != rows+others {
		t.Fatalf("the reader holds %d rows; want %d", n, rows+others)
	}
}

// `syncgo import` interrupted (SIGINT) part-way stops and says what it
// wrote and how to finish; before, it named only the commit it was
// sending ("syncgo import: commit load-52-…: producer: context
// canceled"), not the commits written before it, nor that this one may
// have been written too. The run again writes the rest and counts the
// others cached.
func TestBinaryImportInterrupted(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(importSchema), 0o600))
	const rows, batch = 3000, 10
	var input strings.Builder
	for i := range rows {
		fmt.Fprintf(&input, `{"id":"i%04d","project_id":"p1","n":%d,"f":null,"ok":true,"meta":null,"raw":null}`+"\n", i, i)
	}
	file := filepath.Join(dir, "items.jsonl")
	must(t, os.WriteFile(file, []byte(input.String()), 0o600))
	db := filepath.Join(dir, "s.db")
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", db)
	args := []string{"import", "-url", p.URL, "-schema", schemaPath, "-table", "items", "-id", "load", "-batch", fmt.Sprint(batch), file}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SYNCGO_IMPORT_TOKEN=loader")
	errLog := &binarytest.Log{}
	cmd.Stderr = errLog
	must(t, cmd.Start())
	// Interrupted once some commits are in the log.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ids := commitLog(t, db); len(ids) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("interrupted import: %v; want exit 1\n%s", err, errLog)
	}
	// The server may still be committing the request the import
	// dropped: the log is read once it stopped growing.
	written := settledCount(func() int { _, ids := commitLog(t, db); return len(ids) })
	stopped := fmt.Sprintf("stopped after %d rows in %d commits: %d applied, 0 cached", written*batch, written, written)
	maybe := fmt.Sprintf("stopped after %d rows in %d commits: %d applied, 0 cached", (written-1)*batch, written-1, written-1)
	msg := errLog.String()
	if !strings.Contains(msg, "writes only what is missing") ||
		!(strings.Contains(msg, stopped) || strings.Contains(msg, maybe) && strings.Contains(msg, fmt.Sprintf("commit %d was sent and may have been written", written))) {
		t.Fatalf("the interrupted import said:\n%s\nwant what it wrote (%d commits in the log) and how to finish", msg, written)
	}
	out, errOut, code := binarytest.Run(t, bin, []string{"SYNCGO_IMPORT_TOKEN=loader"}, args...)
	if want := fmt.Sprintf("%d applied, %d cached", rows/batch-written, written); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("the import again: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}

	// An import for a schema version the server does not serve: its
	// first commit is refused, and it says that nothing of it was
	// written.
	newer := filepath.Join(dir, "newer.json")
	must(t, os.WriteFile(newer, []byte(strings.Replace(importSchema, `"version": 1`, `"version": 2`, 1)), 0o600))
	_, errOut, code = binarytest.Run(t, bin, []string{"SYNCGO_IMPORT_TOKEN=loader"},
		"import", "-url", p.URL, "-schema", newer, "-table", "items", "-id", "newer", file)
	if code != 1 || !strings.Contains(errOut, "schema_unsupported") || !strings.Contains(errOut, "stopped after 0 rows in 0 commits") ||
		!strings.Contains(errOut, "commit 1 was refused, nothing of it written") {
		t.Fatalf("an import for schema version 2 to a server of version 1: exit %d\n%s", code, errOut)
	}
}

// importSchemaIndexed is importSchema with a declared unique index, which
// `syncgo migrate` rebuilds on a database of the older line.
var importSchemaIndexed = strings.Replace(importSchema, `"scopes": ["project:{project_id}"],`,
	`"scopes": ["project:{project_id}"], "indexes": [{"name": "items_by_n", "columns": ["n", "id"], "unique": true}],`, 1)

// freeAddr returns a loopback address no listener has at the moment: the
// servers of a test that restarts them keep one address, as a
// deployment's clients see it.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// execSQL runs statements on the test's database (either driver).
func execSQL(t *testing.T, db string, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if strings.HasPrefix(db, "postgres://") {
			pgtest.Exec(t, db, q)
			continue
		}
		conn, err := sqlite.OpenConn(db)
		must(t, err)
		err = sqlitex.ExecuteTransient(conn, q, nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// `syncgo migrate` of an older line's database killed (SIGKILL) at points
// spread over its run: each kill leaves the database as it was or fully
// upgraded (the upgrade is one transaction; SQLite's integrity_check
// passes), the next run does what is left and says so, and once it ran,
// the server starts and a client that synced before the upgrade goes on
// from its cursor without a bootstrap.
func TestBinaryMigrateKilled(t *testing.T) {
	bin := binarytest.Build(t)
	t.Run("sqlite", func(t *testing.T) {
		testMigrateKilled(t, bin, filepath.Join(t.TempDir(), "s.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		testMigrateKilled(t, bin, pgtest.Schema(t, "cli_migrate_killed", false))
	})
}

func testMigrateKilled(t *testing.T, bin, db string) {
	dir := t.TempDir()
	schemaPath, sc := writeSchema(t, dir, importSchemaIndexed)
	const rows = 4000
	var input strings.Builder
	for i := range rows {
		fmt.Fprintf(&input, `{"id":"i%04d","project_id":"p1","n":%d,"f":null,"ok":true,"meta":null,"raw":null}`+"\n", i, i)
	}
	file := filepath.Join(dir, "items.jsonl")
	must(t, os.WriteFile(file, []byte(input.String()), 0o600))
	addr := freeAddr(t)
	serveArgs := []string{"-listen", addr, "-schema", schemaPath, "-db", db}
	p := binarytest.Serve(t, bin, binarytest.Options{}, serveArgs...)
	if out, errOut, code := binarytest.Run(t, bin, []string{"SYNCGO_IMPORT_TOKEN=loader"},
		"import", "-url", p.URL, "-schema", schemaPath, "-table", "items", "-id", "seed", "-batch", "500", file); code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	reader, err := sspclient.New(p.URL, "reader", sc, sspclient.Options{})
	must(t, err)
	must(t, reader.Subscribe("all", "items", map[string][]string{"project_id": {"p1"}}))
	if _, err := reader.SyncUntilQuiet(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	p.Stop()

	// The database becomes one of the older line: no
	// _sync_column_versions, and (Postgres) the declared index not led by
	// the partition.
	pg := strings.HasPrefix(db, "postgres://")
	execSQL(t, db, `ALTER TABLE items DROP COLUMN _sync_column_versions`)
	if pg {
		execSQL(t, db, `DROP INDEX sync_ix_items_by_n`, `CREATE UNIQUE INDEX sync_ix_items_by_n ON items (n, id)`)
	}
	upgraded := func() bool {
		t.Helper()
		out, errOut, code := binarytest.Run(t, bin, nil, "migrate", "-db", db, "-schema", schemaPath, "-dry-run")
		switch {
		case code == 0 && strings.Contains(out, "nothing to upgrade"):
			return true
		case code == 0 && strings.Contains(out, "add column items._sync_column_versions"):
			return false
		}
		t.Fatalf("migrate -dry-run: exit %d\n%s%s", code, out, errOut)
		return false
	}

	// A run to its end is timed on a copy of the older database: the
	// kills fall in its span. (SQLite: the file is copied; Postgres: the
	// run is not timed separately, a second is the span.)
	span := time.Second
	if !pg {
		old, err := os.ReadFile(db)
		must(t, err)
		probe := filepath.Join(dir, "probe.db")
		must(t, os.WriteFile(probe, old, 0o600))
		start := time.Now()
		if out, errOut, code := binarytest.Run(t, bin, nil, "migrate", "-db", probe, "-schema", schemaPath); code != 0 {
			t.Fatalf("migrate a copy: exit %d\n%s%s", code, out, errOut)
		}
		span = time.Since(start)
	}
	// Interrupted (SIGINT) while its transaction waits for a lock another
	// connection holds: it says that nothing was changed (before: only
	// the error, "upgrade: lock sync_partitions: context canceled").
	release := holdWriteLock(t, db)
	cmd, lines, errLog := startCommand(t, bin, "migrate", "-db", db, "-schema", schemaPath)
	time.Sleep(2 * time.Second)
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	for range lines {
	}
	release()
	if msg := errLog.String(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(msg, "nothing was changed; run syncgo migrate again") || upgraded() {
		t.Fatalf("migrate interrupted while waiting for a lock: exit %d:\n%s", cmd.ProcessState.ExitCode(), msg)
	}
	done := false
	for k := 0; k < 8; k += killStep() {
		delay := span * time.Duration(k) / 6
		cmd, lines, errLog := startCommand(t, bin, "migrate", "-db", db, "-schema", schemaPath)
		time.Sleep(delay)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		said := ""
		for line := range lines {
			said += line + "\n"
		}
		if !pg {
			sqliteIntegrity(t, db)
		}
		now := upgraded()
		if done && !now {
			t.Fatalf("killed after %v: an upgraded database is an older one again", delay)
		}
		if !done && now && said != "" && !strings.Contains(said, "upgraded (") {
			t.Fatalf("killed after %v: upgraded, but it said %q %s", delay, said, errLog)
		}
		t.Logf("killed after %v: upgraded %v", delay, now)
		done = now
	}
	out, errOut, code := binarytest.Run(t, bin, nil, "migrate", "-db", db, "-schema", schemaPath)
	if code != 0 || (done != strings.Contains(out, "nothing to upgrade")) {
		t.Fatalf("migrate after the kills (upgraded before: %v): exit %d\n%s%s", done, code, out, errOut)
	}
	if !upgraded() {
		t.Fatal("not upgraded after migrate ran to its end")
	}
	if !pg {
		sqliteIntegrity(t, db)
	}

	// The server starts on the upgraded database; the reader goes on
	// from its cursor.
	p = binarytest.Serve(t, bin, binarytest.Options{}, serveArgs...)
	w, err := producer.New(producer.Config{URL: p.URL, Schema: sc, ClientID: "writer",
		Token: func(context.Context) (string, error) { return "writer", nil }})
	must(t, err)
	if res, err := w.Push(context.Background(), "after-1", producer.Upsert("items", map[string]any{"id": "i0001", "project_id": "p1", "n": -1, "f": nil, "ok": false, "meta": nil, "raw": nil})); err != nil || res.Status != wire.PushApplied {
		t.Fatalf("push after the upgrade: %v %+v", err, res)
	}
	results, err := reader.SyncUntilQuiet(context.Background(), 20)
	must(t, err)
	commits := 0
	for _, res := range results {
		for _, s := range res.Sections {
			if s.Bootstrap {
				t.Fatalf("the reader bootstrapped after the upgrade")
			}
			commits += s.Commits
		}
	}
	if commits != 1 || len(reader.Rows("items")) != rows {
		t.Fatalf("after the upgrade the reader pulled %d commits and holds %d rows; want 1 and %d", commits, len(reader.Rows("items")), rows)
	}
	seqs, ids := commitLog(t, db)
	checkDense(t, seqs, ids)
}

// holdWriteLock holds, on a connection of its own, what keeps the
// migration's transaction waiting (Postgres: sync_partitions in EXCLUSIVE
// mode, which readers pass; SQLite: the write lock), until the returned
// function is called.
func holdWriteLock(t *testing.T, db string) func() {
	t.Helper()
	ctx := context.Background()
	if strings.HasPrefix(db, "postgres://") {
		conn, err := pgx.Connect(ctx, db)
		must(t, err)
		tx, err := conn.Begin(ctx)
		must(t, err)
		_, err = tx.Exec(ctx, "LOCK TABLE sync_partitions IN EXCLUSIVE MODE")
		must(t, err)
		return func() { _ = tx.Rollback(ctx); _ = conn.Close(ctx) }
	}
	conn, err := sqlite.OpenConn(db)
	must(t, err)
	must(t, sqlitex.ExecuteTransient(conn, "BEGIN IMMEDIATE", nil))
	return func() {
		_ = sqlitex.ExecuteTransient(conn, "ROLLBACK", nil)
		conn.Close()
	}
}

// `syncgo export -out FILE` killed (SIGKILL) or interrupted (SIGINT)
// part-way leaves FILE as it was (absent here), never a FILE with some of
// the rows, which the documented export-then-import loop would import as
// the whole table; before, FILE was created at the start and written as
// the rows were read. Complete, FILE holds every row. The file driver is
// SQLite only: what changed is how the output file is written.
func TestBinaryExportKilledLeavesNoPartialFile(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(importSchema), 0o600))
	const rows = 20000
	var input strings.Builder
	for i := range rows {
		fmt.Fprintf(&input, `{"id":"i%05d","project_id":"p1","n":%d,"f":null,"ok":true,"meta":{"pad":"%s"},"raw":null}`+"\n", i, i, strings.Repeat("x", 100))
	}
	file := filepath.Join(dir, "items.jsonl")
	must(t, os.WriteFile(file, []byte(input.String()), 0o600))
	db := filepath.Join(dir, "s.db")
	// The server keeps running: export reads beside it.
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-schema", schemaPath, "-db", db)
	if out, errOut, code := binarytest.Run(t, bin, []string{"SYNCGO_IMPORT_TOKEN=loader"},
		"import", "-url", p.URL, "-schema", schemaPath, "-table", "items", "-id", "seed", "-batch", "500", file); code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	outDir := t.TempDir()
	target := filepath.Join(outDir, "items.jsonl")
	args := []string{"export", "-db", db, "-schema", schemaPath, "-partition", "default", "-table", "items", "-out", target}
	start := time.Now()
	if _, errOut, code := binarytest.Run(t, bin, nil, args...); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	span := time.Since(start)
	full, err := os.ReadFile(target)
	must(t, err)
	if string(full) != strings.TrimSuffix(input.String(), "\n") && string(full) != input.String() {
		t.Fatalf("the export differs from the input (%d bytes; want %d)", len(full), input.Len())
	}
	for k := 0; k < 8; k += killStep() {
		for _, sig := range []os.Signal{os.Kill, os.Interrupt} {
			// A clean directory: no target, nothing a kill left.
			must(t, os.RemoveAll(outDir))
			must(t, os.Mkdir(outDir, 0o700))
			delay := span * time.Duration(k) / 6
			cmd, lines, errLog := startCommand(t, bin, args...)
			time.Sleep(delay)
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			for range lines {
			}
			got, err := os.ReadFile(target)
			complete := err == nil
			switch {
			case err == nil && string(got) == string(full):
			case os.IsNotExist(err):
			case err != nil:
				t.Fatal(err)
			default:
				t.Fatalf("export stopped by %v after %v (exit %d) left %s with %d of %d bytes\n%s", sig, delay, cmd.ProcessState.ExitCode(), target, len(got), len(full), errLog)
			}
			entries, err := os.ReadDir(outDir)
			must(t, err)
			for _, e := range entries {
				if e.Name() != "items.jsonl" && !strings.HasPrefix(e.Name(), "items.jsonl.partial-") {
					t.Fatalf("export stopped by %v after %v left %s", sig, delay, e.Name())
				}
			}
			if sig == os.Interrupt && cmd.ProcessState.ExitCode() != -1 {
				// Go's handler ran: nothing is left beside the target.
				entries, err := os.ReadDir(outDir)
				must(t, err)
				for _, e := range entries {
					if e.Name() != "items.jsonl" {
						t.Fatalf("export interrupted after %v left %s", delay, e.Name())
					}
				}
			}
			t.Logf("%v after %v: exit %d, complete file: %v", sig, delay, cmd.ProcessState.ExitCode(), complete)
		}
	}
}

// `syncgo export` with a schema file of another version than the
// database's names both versions, on both drivers; before, SQLite said
// only "ensure schema: sqlitestore: the store is read-only" for a
// database older than the file.
func TestExportOtherSchemaVersionNamesBoth(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testExportOtherSchemaVersion(t, filepath.Join(t.TempDir(), "s.db")) })
	t.Run("postgres", func(t *testing.T) { testExportOtherSchemaVersion(t, pgtest.Schema(t, "cli_export_version", false)) })
}

func testExportOtherSchemaVersion(t *testing.T, db string) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.json")
	v2src := strings.Replace(strings.Replace(importSchema, `"version": 1`, `"version": 2`, 1),
		`{"name": "raw", "type": "bytes", "nullable": true}`, `{"name": "raw", "type": "bytes", "nullable": true}, {"name": "note", "type": "string", "nullable": true}`, 1)
	v2 := filepath.Join(dir, "v2.json")
	must(t, os.WriteFile(v1, []byte(importSchema), 0o600))
	must(t, os.WriteFile(v2, []byte(v2src), 0o600))
	for _, c := range []struct{ db, file string }{{"v1", v2}, {"v2", v1}} {
		path := db
		if !strings.HasPrefix(db, "postgres://") {
			path = filepath.Join(filepath.Dir(db), c.db+".db")
		}
		src := importSchema
		if c.db == "v2" {
			src = v2src
		}
		parsed, err := schema.ParseJSON([]byte(src))
		must(t, err)
		sc, err := schema.Compile(parsed)
		must(t, err)
		st := killedStore(t, path)
		must(t, st.EnsureSchema(context.Background(), sc))
		must(t, st.Close())
		var stdout, stderr strings.Builder
		code := cli.Run(context.Background(), []string{"export", "-db", path, "-schema", c.file, "-partition", "default", "-table", "items"}, nil, &stdout, &stderr)
		held, file := 1, 2
		if c.db == "v2" {
			held, file = 2, 1
		}
		if want := fmt.Sprintf("the database holds schema version %d, -schema is version %d", held, file); code != 1 || !strings.Contains(stderr.String(), want) {
			t.Fatalf("export of a %s database with the other schema: exit %d: %s\nwant %q", c.db, code, stderr.String(), want)
		}
		if strings.HasPrefix(db, "postgres://") {
			break // one schema of the test database: the older case only
		}
	}
}

// RotateLogEpochs forgets the partitions' deferred client records still
// waiting for their write: a record bound after the rotation is read as
// bound, never with the cursor a client reached under the old epoch.
func TestRotateLogEpochsDropsDeferredClients(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testRotateDropsDeferred(t, filepath.Join(t.TempDir(), "s.db")) })
	t.Run("postgres", func(t *testing.T) { testRotateDropsDeferred(t, pgtest.Schema(t, "cli_rotate_deferred", false)) })
}

func testRotateDropsDeferred(t *testing.T, db string) {
	ctx := context.Background()
	st := killedStore(t, db)
	defer st.Close()
	part, err := st.TouchPartition(ctx, "p1", 1000, "old")
	must(t, err)
	rec := store.ClientRecord{ClientID: "c1", ActorID: "a", WireVersion: 3, Cursor: 0, UpdatedAtMs: 1000}
	_, err = st.BindClient(ctx, "p1", rec)
	must(t, err)
	moved := rec
	moved.Cursor, moved.UpdatedAtMs = 500, 1001
	must(t, st.(store.ClientDeferrer).DeferClient(ctx, "p1", part.LogEpoch, moved, 0))
	rot := st.(interface {
		RotateLogEpochs(context.Context, map[string]string, int64) error
	})
	must(t, rot.RotateLogEpochs(ctx, map[string]string{"p1": "new"}, 1002))
	// The client bootstraps under the new epoch and binds again.
	_, err = st.BindClient(ctx, "p1", rec)
	must(t, err)
	got, err := st.Client(ctx, "p1", "c1")
	must(t, err)
	if got.Cursor != 0 {
		t.Fatalf("the client record bound after the rotation reads cursor %d, the old epoch's; want 0", got.Cursor)
	}
}

// writeSchema writes the schema text to dir/schema.json and returns the
// file's path and the schema compiled.
func writeSchema(t *testing.T, dir, text string) (string, *schema.Compiled) {
	t.Helper()
	path := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(path, []byte(text), 0o600))
	parsed, err := schema.ParseJSON([]byte(text))
	must(t, err)
	sc, err := schema.Compile(parsed)
	must(t, err)
	return path, sc
}
