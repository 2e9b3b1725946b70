package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// pushLike is one push as the engine runs it: the serve gate after the
// partition lock, the row, the commit and its push result, in one Write.
func pushLike(ctx context.Context, s *Store, c *schema.Compiled, partition, id string, w store.RowWrite) error {
	return s.Write(ctx, partition, func(ctx context.Context, tx store.WriteTx) error {
		g, err := tx.(store.BarrierTx).ServeGate(ctx, c.Version())
		if err != nil {
			return err
		}
		if g.StoredSchemaVersion != c.Version() {
			return fmt.Errorf("serve gate: stored version %d", g.StoredSchemaVersion)
		}
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		seq, err := tx.AppendCommit(ctx, commitOf(id, upsertChange(w)))
		if err != nil {
			return err
		}
		_, err = tx.PutPushResult(ctx, "c1", id, store.PushRecord{Status: wire.PushApplied, CommitSeq: seq,
			Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}})
		return err
	})
}

// TestStartsWhileWriting: process starts (Open and EnsureSchemaWith with
// the same schema, each with a pool of its own) while writers push
// through Write. Some starts find the core tables behind (a trigger or an
// index dropped meanwhile) and migrate them. No start and no write fails:
// a start on an up-to-date database takes no lock, and the migrations of
// the others take their locks in the documented order and give way
// (lock_timeout, retry) rather than closing a cycle with a writer, which
// held the partition row lock and read sync_schema_meta for the serve gate
// before appending to sync_commits.
func TestStartsWhileWriting(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	c := testSchema(t, 1)
	s := openIn(t, name, Config{})
	ensure(t, s, c)
	const (
		starts      = 15
		concurrency = 3
		writers     = 3
	)
	pools := make([]*pgxpool.Pool, starts)
	for i := range pools {
		pools[i] = newPool(t, name, 4)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var (
		wg              sync.WaitGroup
		writes, failed  atomic.Int64
		writeErrsMu     sync.Mutex
		writeErrs       []error
		startsDone      atomic.Bool
		writesDuringRun atomic.Int64
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			partition := fmt.Sprintf("p%d", i%2) // two writers share a partition
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", i, n)
				w := task{id: id, project: "p1", owner: "o1"}.write(t, c, 1)
				if err := pushLike(ctx, s, c, partition, id, w); err != nil {
					failed.Add(1)
					writeErrsMu.Lock()
					writeErrs = append(writeErrs, err)
					writeErrsMu.Unlock()
					continue
				}
				writes.Add(1)
				if !startsDone.Load() {
					writesDuringRun.Add(1)
				}
			}
		}()
	}

	// Starts in rounds of concurrency; before every other round the core
	// tables fall behind, so that the round's first start migrates them
	// under the writers.
	var startErrs []error
	for round := 0; round < starts/concurrency; round++ {
		switch round % 4 {
		case 1:
			admin(t, testURL(t), "DROP TRIGGER sync_commits_writer_fence ON "+name+".sync_commits")
		case 3:
			admin(t, testURL(t), "DROP INDEX "+name+".sync_changes_by_table")
		}
		errs := make(chan error, concurrency)
		for k := range concurrency {
			pool := pools[round*concurrency+k]
			go func() {
				st, err := Open(ctx, Config{Pool: pool})
				if err == nil {
					err = st.EnsureSchemaWith(ctx, c, nil)
					_ = st.Close()
				}
				errs <- err
			}()
		}
		for range concurrency {
			if err := <-errs; err != nil {
				startErrs = append(startErrs, err)
			}
		}
	}
	startsDone.Store(true)
	close(stop)
	wg.Wait()

	if len(startErrs) > 0 {
		t.Errorf("%d of %d starts failed; first: %v", len(startErrs), starts, startErrs[0])
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d writes failed; first: %v", n, n+writes.Load(), writeErrs[0])
	}
	if n := writesDuringRun.Load(); n < int64(writers) {
		t.Errorf("only %d writes while the starts ran: the test did not overlap them", n)
	}
	if steps, err := planCore(ctx, s.pool); err != nil || len(steps) > 0 {
		t.Errorf("core plan after the starts: %v, %v; want nothing", stepLines(steps), err)
	}
	for _, p := range []string{"p0", "p1"} {
		if gaps := queryInt(t, s, `SELECT count(*) FROM sync_commits c WHERE partition = $1 AND commit_seq > 1
			AND NOT EXISTS (SELECT 1 FROM sync_commits d WHERE d.partition = c.partition AND d.commit_seq = c.commit_seq - 1)`, p); gaps != 0 {
			t.Errorf("partition %s: %d gaps in the commit sequence", p, gaps)
		}
	}
	if got := queryInt(t, s, `SELECT count(*) FROM sync_commits`); got != writes.Load() {
		t.Errorf("%d commits for %d successful writes", got, writes.Load())
	}
}

// waitForWaiter returns once a backend other than except waits for a lock
// on a relation of the database schema (pg_locks, not granted).
func waitForWaiter(t *testing.T, s *Store, schemaName string, except uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var waiting int64
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND l.pid <> $2 AND c.relnamespace = $1::regnamespace`, schemaName, except).Scan(&waiting)
		if err != nil {
			t.Fatalf("pg_locks: %v", err)
		}
		if waiting > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no backend waits for a lock")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestCoreMigrationGivesWayToWriter: a writer holds its partition row
// lock and has read sync_schema_meta (the serve gate) when a start finds
// the core tables behind (the fence trigger missing). The migration waits
// at sync_partitions, before any lock on the log tables, so the writer's
// append to sync_commits goes through and commits; then the migration
// runs. Neither fails. (Running the core DDL in file order, as Open did,
// closed the cycle: a lock on sync_commits taken, sync_schema_meta waited
// for, and Postgres failed one of the two with deadlock_detected.)
func TestCoreMigrationGivesWayToWriter(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	if _, err := s.pool.Exec(context.Background(), `DROP TRIGGER sync_commits_writer_fence ON sync_commits`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, sqlLockPartition, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT * FROM sync_schema_meta`); err != nil {
		t.Fatal(err)
	}

	opened := make(chan error, 1)
	pool := newPool(t, name, 4)
	go func() {
		_, err := Open(ctx, Config{Pool: pool})
		opened <- err
	}()
	waitForWaiter(t, s, name, w.Conn().PgConn().PID())
	if _, err := tx.Exec(ctx, sqlInsertCommit, "p", int64(1), "c1", "x1", "a1", int64(1), int64(1)); err != nil {
		t.Fatalf("the writer's append: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the writer's commit: %v", err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("Open: %v", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sync_commits_writer_fence' AND tgrelid = 'sync_commits'::regclass`); n != 1 {
		t.Errorf("fence triggers after the migration: %d", n)
	}
}

// TestOpenUpToDateTakesNoLock: on a database at the layout, Open and a
// same-version EnsureSchemaWith read the catalog and nothing else: with
// an ACCESS EXCLUSIVE request queued on sync_commits and on the app table
// behind a reader that holds them, any DDL on them (even CREATE INDEX IF
// NOT EXISTS of an index that exists) would wait; the start returns at
// once.
func TestOpenUpToDateTakesNoLock(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	c := testSchema(t, 1)
	s := openIn(t, name, Config{})
	ensure(t, s, c)
	ctx := context.Background()

	reader, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release()
	rtx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rtx.Rollback(ctx) }()
	if _, err := rtx.Exec(ctx, `LOCK TABLE sync_commits, tasks IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	// Two queued ACCESS EXCLUSIVE requests; they give up after the test.
	var queued sync.WaitGroup
	for _, table := range []string{"sync_commits", "tasks"} {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		queued.Add(1)
		go func() {
			defer queued.Done()
			defer conn.Release()
			_ = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '20s'; LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE")
				return err
			})
		}()
	}
	for {
		if queryInt(t, s, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation IN ('sync_commits'::regclass, 'tasks'::regclass)`) == 2 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}

	start, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, cfg := range []Config{{}, {ReadOnly: true}} {
		st, err := Open(start, Config{Pool: newPool(t, name, 2), ReadOnly: cfg.ReadOnly})
		if err != nil {
			t.Fatalf("Open(ReadOnly %t) behind the queued locks: %v", cfg.ReadOnly, err)
		}
		if err := st.EnsureSchemaWith(start, c, nil); err != nil {
			t.Errorf("EnsureSchemaWith(ReadOnly %t) behind the queued locks: %v", cfg.ReadOnly, err)
		}
		if p, err := st.PlanSchema(start, c, nil); err != nil || p.Action != store.SchemaNone || len(p.Upgrade) > 0 {
			t.Errorf("PlanSchema = %+v, %v; want none", p, err)
		}
		_ = st.Close()
	}
	_ = rtx.Rollback(ctx)
	queued.Wait()
}

// TestCoreColumnsMatchDDL: coreColumns names the columns that the
// migrations create, in order, and a fresh database plans no core step.
func TestCoreColumnsMatchDDL(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	objects, err := coreObjects()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := readCoreCatalog(ctx, s.pool, objects)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, o := range objects {
		if o.kind == "table" {
			tables = append(tables, o.name)
		}
	}
	want := coreColumns()
	if len(want) != len(tables) {
		t.Errorf("coreColumns has %d tables, the DDL %d", len(want), len(tables))
	}
	for _, table := range tables {
		var names []string
		for _, c := range want[table] {
			names = append(names, c.name)
		}
		if got := cat.relations[table].columns; !slices.Equal(got, names) {
			t.Errorf("%s: columns %v, coreColumns %v", table, got, names)
		}
	}
	steps, err := planCore(ctx, s.pool)
	if err != nil || len(steps) > 0 {
		t.Errorf("planCore after Open = %v, %v; want nothing", stepLines(steps), err)
	}
	kinds := map[string]int{}
	for _, o := range objects {
		kinds[o.kind]++
	}
	if kinds["table"] != 21 || kinds["index"] != 14 || kinds["function"] != 1 || kinds["trigger"] != 1 {
		t.Errorf("parsed core objects: %v", kinds)
	}
}

// TestLockGaveWay: the errors a migration retries on.
func TestLockGaveWay(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	holder, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `LOCK TABLE sync_commits IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10ms'; LOCK TABLE sync_commits IN ACCESS EXCLUSIVE MODE`)
		return err
	})
	if !lockGaveWay(fmt.Errorf("wrapped: %w", err)) {
		t.Errorf("lock timeout %v: not retried", err)
	}
	if lockGaveWay(errors.New("other")) || lockGaveWay(nil) {
		t.Error("other errors retried")
	}
}

// TestPoolSize: a pool Open makes from URL has pool_max_conns when the
// URL sets it (and Config.MaxConns does not), else Config.MaxConns, else
// twice GOMAXPROCS and at least minDefaultMaxConns.
func TestPoolSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := poolTestURL(t)
	for _, c := range []struct {
		url  string
		max  int32
		want int32
	}{
		{base + "&pool_max_conns=3", 0, 3},
		{base + "&pool_max_conns=3", 5, 5},
		{base, 7, 7},
		{base, 0, int32(max(minDefaultMaxConns, 2*runtime.GOMAXPROCS(0)))},
	} {
		s, err := Open(ctx, Config{URL: c.url, MaxConns: c.max, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.pool.Config().MaxConns; got != c.want {
			t.Errorf("%s with MaxConns %d: pool of %d, want %d", c.url, c.max, got, c.want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolMinConns: a pool Open makes from URL opens Config.MinConns
// connections without being asked for them (capped at its size), unless
// the URL sets pool_min_conns, which wins.
func TestPoolMinConns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := poolTestURL(t)
	for _, c := range []struct {
		url       string
		min, max  int32
		want      int32
		connected bool
	}{
		{base, 0, 4, 0, false},
		{base, 3, 4, 3, true},
		{base, 9, 4, 4, true},
		{base + "&pool_min_conns=1", 3, 4, 1, true},
	} {
		s, err := Open(ctx, Config{URL: c.url, MinConns: c.min, MaxConns: c.max, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.pool.Config().MinConns; got != c.want {
			t.Errorf("%s with MinConns %d: pool keeps %d, want %d", c.url, c.min, got, c.want)
		}
		if c.connected {
			// The pool opens them in the background; nothing here asks for
			// more than the one Open used.
			deadline := time.Now().Add(10 * time.Second)
			for s.pool.Stat().TotalConns() < c.want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := s.pool.Stat().TotalConns(); got < c.want {
				t.Errorf("%s with MinConns %d: %d connections open, want %d", c.url, c.min, got, c.want)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// poolTestURL returns the test database's URL with the search_path of a
// fresh schema whose tables exist: the pool tests' stores open it
// read-only (Open creates nothing read-only).
func poolTestURL(t *testing.T) string {
	t.Helper()
	url := testURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	name := newSchema(t)
	openIn(t, name, Config{})
	return url + sep + "search_path=" + name
}
