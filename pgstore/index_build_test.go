package pgstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
)

// TestMissingIndexBuiltWithoutHoldingWriters: a database that lacks
// sync_row_scopes_by_row (one an older syncgo or the reference created)
// gets it at Open without holding back the writers of the processes
// already running on it: while Open builds it over a large
// sync_row_scopes, a writer's first locks (sync_partitions and
// sync_row_scopes, ROW EXCLUSIVE) are always granted at once.
func TestMissingIndexBuiltWithoutHoldingWriters(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	withoutRowScopesByRow(t, name, 300000)

	ctx := context.Background()
	probe := connectIn(t, name)
	var (
		stop            atomic.Bool
		probes, refused int
		firstRefusal    string
		wg              sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			probes++
			err := pgx.BeginFunc(ctx, probe, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "LOCK TABLE sync_partitions IN ROW EXCLUSIVE MODE NOWAIT; LOCK TABLE sync_row_scopes IN ROW EXCLUSIVE MODE NOWAIT")
				return err
			})
			if err != nil {
				if refused == 0 {
					firstRefusal = err.Error()
				}
				refused++
			}
		}
	}()
	openIn(t, name, Config{})
	stop.Store(true)
	wg.Wait()
	exists := validIndexes(t, s, name, "sync_row_scopes_by_row")
	if exists != 1 {
		t.Fatal("Open did not build a valid sync_row_scopes_by_row")
	}
	if refused > 0 {
		t.Fatalf("while Open built the index, %d of %d writer lock probes were refused (first: %s)", refused, probes, firstRefusal)
	}
	if probes < 2 {
		t.Fatalf("only %d probes ran during Open", probes)
	}
	t.Logf("%d probes, none refused", probes)
}

// TestMissingIndexBuiltByConcurrentOpens: processes that start together
// on a database without sync_row_scopes_by_row all open, and the index
// they leave is valid.
func TestMissingIndexBuiltByConcurrentOpens(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	withoutRowScopesByRow(t, name, 50000)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := Open(context.Background(), Config{Pool: newPool(t, name, 4)})
			if err == nil {
				err = st.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	valid := validIndexes(t, s, name, "sync_row_scopes_by_row")
	if valid != 1 {
		t.Fatalf("%d valid sync_row_scopes_by_row after concurrent Opens, want 1", valid)
	}
}

// TestAbandonedIndexBuildRebuiltAtOpen: an index that a concurrent build
// left invalid (its process died during the build) is not taken for
// built: the next Open drops and builds it, and it is valid.
func TestAbandonedIndexBuildRebuiltAtOpen(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	// What an interrupted CREATE INDEX CONCURRENTLY leaves: the index in
	// the catalog, marked invalid.
	invalidateIndex(t, name+".sync_row_scopes_by_row")
	valid := func() int64 {
		return validIndexes(t, s, name, "sync_row_scopes_by_row")
	}
	if valid() != 0 {
		t.Fatal("the index is still valid")
	}
	openIn(t, name, Config{})
	if valid() != 1 {
		t.Fatal("Open left sync_row_scopes_by_row invalid")
	}
}

// TestDeclaredIndexBuiltBeforeBumpLocks: a schema bump that declares a new
// index on a table and columns that exist builds it concurrently before
// it takes the migration locks, which hold every writer of every
// partition: when the locks are taken the index is there and valid, and
// the bump under them has nothing of it left to build. An index the bump
// left invalid (an interrupted concurrent build) is built again.
func TestDeclaredIndexBuiltBeforeBumpLocks(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	bulkTasks(t, name, 50000)
	v2 := func(version int32) *schema.Compiled { return ownerIndexSchema(t, version) }
	ix, _ := v2(2).Table("tasks")
	physical := ix.Indexes()[2].PhysicalName
	valid := func() int64 {
		return validIndexes(t, s, name, physical)
	}
	var atLock []int64
	b := openIn(t, name, Config{migrationLocked: func() { atLock = append(atLock, valid()) }})
	ensure(t, b, v2(2))
	if len(atLock) == 0 || atLock[0] != 1 {
		t.Fatalf("valid %s when the bump took the migration locks: %v; want 1 (built before them)", physical, atLock)
	}

	// An interrupted concurrent build leaves the index invalid: the next
	// bump drops it and builds it again.
	invalidateIndex(t, name+"."+physical)
	c := openIn(t, name, Config{})
	ensure(t, c, v2(3))
	if valid() != 1 {
		t.Fatalf("after the next bump, %s is not valid", physical)
	}

	// One that turns invalid after the pre-build looked (another
	// process's build of it that died) is built again under the locks.
	d := openIn(t, name, Config{migrationLocked: func() { invalidateIndex(t, name+"."+physical) }})
	ensure(t, d, v2(4))
	if valid() != 1 {
		t.Fatalf("an index invalid when the bump took its locks is still invalid after it: %s", physical)
	}
}

// TestUniqueIndexBuiltBeforeBumpLocks: a declared unique index on a table
// and column that exist is built concurrently before the bump takes its
// locks, like a plain one. One whose build meets duplicate rows is dropped
// again, leaving no invalid index that would go on checking the older
// processes' writes, and the bump is refused with the duplicate, as when
// it built the index under its locks.
func TestUniqueIndexBuiltBeforeBumpLocks(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	bulkTasks(t, name, 20000)
	unique := func(version int32, column string) *schema.Compiled {
		c, err := schema.New(version).
			Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("owner_id"),
				schema.String("title").Null(), schema.Integer("rank").Null(), schema.JSON("meta").Null(),
				schema.Boolean("done").Null(), schema.Float("score").Null(), schema.Bytes("blob").Null()).
			Scope("project:{project_id}").Scope("owner:{owner_id}").
			UniqueIndex("tasks_by_title", "title").Index("tasks_by_rank", "rank").UniqueIndex("tasks_unique", column).
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tbl, _ := unique(2, "id").Table("tasks")
	physical := tbl.Indexes()[2].PhysicalName
	count := func() int64 {
		return queryInt(t, s, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = $2::regnamespace`, physical, name)
	}

	// owner_id repeats (50 owners): the build meets duplicates.
	var atLock []int64
	b := openIn(t, name, Config{migrationLocked: func() { atLock = append(atLock, count()) }})
	err := b.EnsureSchema(context.Background(), unique(2, "owner_id"))
	if err == nil || !strings.Contains(err.Error(), "duplicate") && !strings.Contains(err.Error(), "23505") {
		t.Fatalf("EnsureSchema with a unique index over duplicates = %v; want the duplicate reported", err)
	}
	if len(atLock) == 0 || atLock[0] != 0 {
		t.Fatalf("indexes named %s when the bump took its locks: %v; want 0 (the failed build dropped)", physical, atLock)
	}
	if n := count(); n != 0 {
		t.Fatalf("after the refused bump, %d indexes named %s are left", n, physical)
	}

	atLock = nil
	c := openIn(t, name, Config{migrationLocked: func() { atLock = append(atLock, validIndexes(t, s, name, physical)) }})
	ensure(t, c, unique(2, "id"))
	if len(atLock) == 0 || atLock[0] != 1 {
		t.Fatalf("valid %s when the bump took its locks: %v; want 1 (built before them)", physical, atLock)
	}
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO tasks (_sync_partition, _sync_row_id, id, project_id, owner_id, _sync_server_version, _sync_scopes, _sync_payload)
VALUES ('bulk', 'dup', 'r1', 'p', 'o', 1, '{}', '\x')`); err == nil {
		t.Fatalf("%s does not refuse a duplicate id", physical)
	}
}

// validIndexes counts the valid indexes named index in schema schemaName
// (0 or 1).
func validIndexes(t *testing.T, s *Store, schemaName, index string) int64 {
	t.Helper()
	return queryInt(t, s, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = $1 AND c.relnamespace = $2::regnamespace AND i.indisvalid`, index, schemaName)
}

// TestBumpWaitsForAnotherProcessIndexBuild: a bump that finds a declared
// index another process is still building concurrently (a second new
// process started during the first one's build) waits for that build
// without any lock, and then neither drops nor rebuilds it under the
// migration locks: the index valid when the locks are taken is the one
// the other process built.
func TestBumpWaitsForAnotherProcessIndexBuild(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ensure(t, s, testSchema(t, 1))
	bulkTasks(t, name, 20000)
	c := ownerIndexSchema(t, 2)
	tbl, _ := c.Table("tasks")
	physical := tbl.Indexes()[2].PhysicalName

	ctx := context.Background()
	// The other process's build: a concurrent build held in progress by
	// an open transaction with a snapshot (repeatable read keeps it),
	// which it waits for.
	holder := connectIn(t, name)
	hold, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, "SELECT count(*) FROM tasks"); err != nil {
		t.Fatal(err)
	}
	builder := connectIn(t, name)
	built := make(chan error, 1)
	go func() {
		_, err := builder.Exec(ctx, "CREATE INDEX CONCURRENTLY IF NOT EXISTS "+physical+" ON tasks (_sync_partition, owner_id)")
		built <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for queryInt(t, s, `SELECT count(*) FROM pg_stat_progress_create_index p JOIN pg_class c ON c.oid = p.index_relid
WHERE c.relname = $1 AND c.relnamespace = $2::regnamespace`, physical, name) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the other build did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	oid := queryInt(t, s, "SELECT $1::regclass::oid::bigint", name+"."+physical)
	released := make(chan struct{})
	go func() {
		defer close(released)
		// Holding time, not synchronization: the other build stays in
		// progress while the bump starts.
		time.Sleep(time.Second)
		_ = hold.Rollback(ctx)
	}()
	defer func() { <-released }()
	var atLock []int64
	b := openIn(t, name, Config{migrationLocked: func() { atLock = append(atLock, validIndexes(t, s, name, physical)) }})
	ensure(t, b, c)
	if err := <-built; err != nil {
		t.Fatalf("the other process's build: %v", err)
	}
	if len(atLock) == 0 || atLock[0] != 1 {
		t.Fatalf("valid %s when the bump took its locks: %v; want 1 (the other build waited for)", physical, atLock)
	}
	if now := queryInt(t, s, "SELECT $1::regclass::oid::bigint", name+"."+physical); now != oid {
		t.Fatalf("%s was rebuilt (oid %d, the other process built %d)", physical, now, oid)
	}
}

// ownerIndexSchema is testSchema at version with one more plain index,
// on owner_id.
func ownerIndexSchema(t *testing.T, version int32) *schema.Compiled {
	t.Helper()
	c, err := schema.New(version).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("owner_id"),
			schema.String("title").Null(), schema.Integer("rank").Null(), schema.JSON("meta").Null(),
			schema.Boolean("done").Null(), schema.Float("score").Null(), schema.Bytes("blob").Null()).
		Scope("project:{project_id}").Scope("owner:{owner_id}").
		UniqueIndex("tasks_by_title", "title").Index("tasks_by_rank", "rank").Index("tasks_by_owner", "owner_id").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withoutRowScopesByRow drops sync_row_scopes_by_row from schema name and
// fills sync_row_scopes with n entries, as a database of the reference (or
// of a syncgo before the index) with a large table would be.
func withoutRowScopesByRow(t *testing.T, name string, n int) {
	t.Helper()
	admin(t, testURL(t), "DROP INDEX "+name+".sync_row_scopes_by_row")
	admin(t, testURL(t), fmt.Sprintf("INSERT INTO %s.sync_row_scopes SELECT 'bulk', 'tasks', 'project_id', 'p' || (i %% 100), 'r' || i FROM generate_series(1, %d) i", name, n))
}

// bulkTasks inserts n rows into the tasks table of schema name (partition
// bulk, 50 owners) straight into its columns: rows an index is built
// over, not rows the driver reads.
func bulkTasks(t *testing.T, name string, n int) {
	t.Helper()
	admin(t, testURL(t), fmt.Sprintf(`INSERT INTO %s.tasks (_sync_partition, _sync_row_id, id, project_id, owner_id, _sync_server_version, _sync_scopes, _sync_payload)
SELECT 'bulk', 'r' || i, 'r' || i, 'p', 'o' || (i %% 50), 1, '{}', '\x' FROM generate_series(1, %d) i`, name, n))
}

// invalidateIndex marks the schema-qualified index invalid, as an
// interrupted CREATE INDEX CONCURRENTLY leaves it.
func invalidateIndex(t *testing.T, qualified string) {
	t.Helper()
	admin(t, testURL(t), "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '"+qualified+"'::regclass")
}

// connectIn opens a connection of its own whose statements run in schema
// name, closed at cleanup.
func connectIn(t testing.TB, name string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "SET search_path = "+name); err != nil {
		t.Fatal(err)
	}
	return conn
}
