package sqlitestore

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// Databases written by the reference server, built here with DDL of our
// own that has the reference's layout: its core tables before 0.23 have no
// sync_commits.writer_version (and no checkpoint, fence or, before 0.21,
// tombstone table); before 0.15 sync_clients has no wire_version; its
// sync_clients.cursor and subscriptions are NOT NULL; the 0.15 to 0.20
// line has no _sync_column_versions on app tables and declares indexes
// without leading them with _sync_partition.

// legacyCore is the core of the reference 0.15 to 0.20 line (sync_clients
// with wire_version).
const legacyCore = `
CREATE TABLE sync_partitions(partition TEXT PRIMARY KEY,
  max_commit_seq INTEGER NOT NULL DEFAULT 0, horizon_seq INTEGER NOT NULL DEFAULT 0);
CREATE TABLE sync_partition_registry(partition TEXT PRIMARY KEY, log_epoch TEXT NOT NULL,
  epoch_required INTEGER NOT NULL DEFAULT 0, last_authenticated_at_ms INTEGER NOT NULL);
CREATE TABLE sync_row_scopes(partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, row_id TEXT NOT NULL, PRIMARY KEY(partition, tbl, var, value, row_id));
CREATE TABLE sync_commits(partition TEXT NOT NULL, commit_seq INTEGER NOT NULL,
  client_id TEXT NOT NULL, client_commit_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL, PRIMARY KEY(partition, commit_seq));
CREATE INDEX sync_commits_by_time ON sync_commits(partition, created_at_ms);
CREATE TABLE sync_changes(partition TEXT NOT NULL, commit_seq INTEGER NOT NULL, idx INTEGER NOT NULL,
  tbl TEXT NOT NULL, row_id TEXT NOT NULL, op INTEGER NOT NULL, row_version INTEGER,
  scopes TEXT NOT NULL, payload BLOB, PRIMARY KEY(partition, commit_seq, idx));
CREATE INDEX sync_changes_by_table ON sync_changes(partition, commit_seq, tbl, idx);
CREATE TABLE sync_change_scopes(partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, commit_seq INTEGER NOT NULL, PRIMARY KEY(partition, tbl, var, value, commit_seq));
CREATE TABLE sync_push_results(partition TEXT NOT NULL, client_id TEXT NOT NULL,
  client_commit_id TEXT NOT NULL, result TEXT NOT NULL, PRIMARY KEY(partition, client_id, client_commit_id));
CREATE TABLE sync_reactions(partition TEXT NOT NULL, idempotency_key TEXT NOT NULL,
  type TEXT NOT NULL, version INTEGER NOT NULL, payload TEXT NOT NULL,
  source_client_id TEXT NOT NULL, source_client_commit_id TEXT NOT NULL,
  source_commit_seq INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
  available_at_ms INTEGER NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
  lease_owner TEXT, lease_expires_at_ms INTEGER, completed_at_ms INTEGER, last_failure TEXT,
  PRIMARY KEY(partition, idempotency_key),
  CHECK(status IN ('pending', 'leased', 'completed', 'dead-letter')));
CREATE INDEX sync_reactions_due ON sync_reactions(partition, status, available_at_ms, created_at_ms, idempotency_key);
CREATE TABLE sync_clients(partition TEXT NOT NULL, client_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  wire_version INTEGER NOT NULL DEFAULT 1, cursor INTEGER NOT NULL, subscriptions TEXT NOT NULL,
  updated_at_ms INTEGER NOT NULL, PRIMARY KEY(partition, client_id));
CREATE TABLE sync_blob_refs(partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  blob_id TEXT NOT NULL, PRIMARY KEY(partition, tbl, row_id, blob_id));
CREATE TABLE sync_schema_meta(id INTEGER PRIMARY KEY CHECK (id = 1), schema_version INTEGER NOT NULL,
  layouts TEXT NOT NULL DEFAULT '{}');
INSERT INTO sync_schema_meta(id, schema_version, layouts) VALUES (1, 1,
  '{"items":[{"name":"id","type":"string","nullable":false},{"name":"p","type":"string","nullable":false},{"name":"title","type":"string","nullable":true}]}');
`

// legacyItems is the items table of legacySchema as the 0.15 to 0.20 line
// creates it.
const legacyItems = `
CREATE TABLE "items" ("_sync_partition" TEXT NOT NULL, "_sync_row_id" TEXT NOT NULL,
  "id" TEXT NOT NULL, "p" TEXT NOT NULL, "title" TEXT, "_sync_server_version" INTEGER NOT NULL,
  "_sync_scopes" TEXT NOT NULL, "_sync_payload" BLOB NOT NULL,
  PRIMARY KEY ("_sync_partition", "_sync_row_id"));
CREATE UNIQUE INDEX "sync_ix_by_title" ON "items" ("p", "title");
`

// currentItems is the items table as the reference 0.21 and later (and
// syncgo) create it.
const currentItems = `
CREATE TABLE "items" ("_sync_partition" TEXT NOT NULL, "_sync_row_id" TEXT NOT NULL,
  "id" TEXT NOT NULL, "p" TEXT NOT NULL, "title" TEXT, "_sync_server_version" INTEGER NOT NULL,
  "_sync_scopes" TEXT NOT NULL, "_sync_payload" BLOB NOT NULL, "_sync_column_versions" BLOB,
  PRIMARY KEY ("_sync_partition", "_sync_row_id"));
CREATE UNIQUE INDEX "sync_ix_by_title" ON "items" ("_sync_partition", "p", "title");
CREATE TABLE sync_tombstones(partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  commit_seq INTEGER NOT NULL, PRIMARY KEY(partition, tbl, row_id));
`

// legacySchema is items(id, p, title?) scoped by p with a unique index on
// (p, title), at version 1: the schema of the databases above.
func legacySchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).Table("items", "id", schema.String("id"), schema.String("p"), schema.String("title").Null()).
		Scope("p:{p}").UniqueIndex("by_title", "p", "title").Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawDB is a connection of its own on a database file, as another server
// process (the reference) would have.
type rawDB struct {
	t *testing.T
	c *conn
}

func openRaw(t *testing.T, path string) *rawDB {
	t.Helper()
	sc, err := sqlite.OpenConn(path, sqlite.OpenReadWrite|sqlite.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	sc.SetBusyTimeout(5 * time.Second)
	db := &rawDB{t: t, c: newConn(sc)}
	t.Cleanup(db.close)
	return db
}

func (db *rawDB) close() {
	if db.c != nil {
		db.c.close()
		db.c = nil
	}
}

func (db *rawDB) script(s string) {
	db.t.Helper()
	if err := db.c.execScript(s); err != nil {
		db.t.Fatalf("script: %v", err)
	}
}

func (db *rawDB) exec(query string, args ...any) {
	db.t.Helper()
	if err := db.c.exec(query, args...); err != nil {
		db.t.Fatalf("%s: %v", query, err)
	}
}

func (db *rawDB) int(query string, args ...any) int64 {
	db.t.Helper()
	var n int64
	if err := db.c.queryRow(query, args...).Scan(&n); err != nil {
		db.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func sqlArg(v wire.Value) any {
	if v.Null {
		return nil
	}
	return v.Str
}

// putRow writes a current row of items as the reference does: the row
// with its typed columns, then its row scope index.
func (db *rawDB) putRow(partition string, w store.RowWrite) {
	db.exec(`INSERT INTO items(_sync_partition, _sync_row_id, id, p, title, _sync_server_version, _sync_scopes, _sync_payload)
VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(_sync_partition, _sync_row_id) DO UPDATE SET title=excluded.title,
  _sync_server_version=excluded._sync_server_version, _sync_scopes=excluded._sync_scopes, _sync_payload=excluded._sync_payload`,
		partition, w.RowID, sqlArg(w.Values[0]), sqlArg(w.Values[1]), sqlArg(w.Values[2]), w.ServerVersion,
		string(store.EncodeScopes(w.Scopes)), w.Payload)
	db.exec("DELETE FROM sync_row_scopes WHERE partition=? AND tbl=? AND row_id=?", partition, w.Table, w.RowID)
	for _, sc := range w.Scopes {
		db.exec("INSERT OR IGNORE INTO sync_row_scopes(partition, tbl, var, value, row_id) VALUES (?,?,?,?,?)", partition, w.Table, sc.Key, sc.Value, w.RowID)
	}
}

func (db *rawDB) deleteRow(partition, rowID string) {
	db.exec("DELETE FROM items WHERE _sync_partition=? AND _sync_row_id=?", partition, rowID)
	db.exec("DELETE FROM sync_row_scopes WHERE partition=? AND tbl='items' AND row_id=?", partition, rowID)
}

// appendCommit appends a commit as the reference does: the next sequence
// from sync_partitions, the commit row without writer_version, the
// changes and their scope index.
func (db *rawDB) appendCommit(partition, clientCommitID string, changes ...store.Change) int64 {
	db.t.Helper()
	db.exec("INSERT INTO sync_partitions(partition, max_commit_seq) VALUES (?, 0) ON CONFLICT(partition) DO NOTHING", partition)
	db.exec("UPDATE sync_partitions SET max_commit_seq = max_commit_seq + 1 WHERE partition=?", partition)
	seq := db.int("SELECT max_commit_seq FROM sync_partitions WHERE partition=?", partition)
	db.exec(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)
VALUES (?,?,?,?,?,?)`, partition, seq, "c1", clientCommitID, "a1", 1_700_000_000_000+seq)
	for i, ch := range changes {
		var version any
		if ch.Op == wire.OpUpsert {
			version = ch.RowVersion
		}
		db.exec(`INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
VALUES (?,?,?,?,?,?,?,?,?)`, partition, seq, i, ch.Table, ch.RowID, int(ch.Op), version, string(store.EncodeScopes(ch.Scopes)), nullBytes(ch.Payload))
		for _, sc := range ch.Scopes {
			db.exec("INSERT OR IGNORE INTO sync_change_scopes(partition, tbl, var, value, commit_seq) VALUES (?,?,?,?,?)",
				partition, ch.Table, sc.Key, sc.Value, seq)
		}
	}
	return seq
}

// fileState is the bytes of a database file and of its WAL.
func fileState(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if wal, err := os.ReadFile(path + "-wal"); err == nil {
		b = append(append(b, "\x00--wal--\x00"...), wal...)
	}
	return b
}

func columnNames(t *testing.T, db *rawDB, table string) []string {
	t.Helper()
	cols, err := physicalColumns(db.c, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cols {
		out = append(out, c.name)
	}
	return out
}

func item(t *testing.T, sc *schema.Compiled, id, p, title string, version int64) store.RowWrite {
	vals := []wire.Value{{Str: id}, {Str: p}, {Null: true}}
	if title != "" {
		vals[2] = wire.Value{Str: title}
	}
	return storetest.NewRowWrite(t, sc, "items", vals, version)
}

// TestCoreColumnsMatchDDL: the core columns the open checks are the ones
// migrations/001_core.sql creates, and every object of the DDL is parsed.
func TestCoreColumnsMatchDDL(t *testing.T) {
	t.Parallel()
	objects, err := parseCoreDDL(coreDDL)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(coreDDL, "\n") {
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(line)), "CREATE ") {
			n++
		}
	}
	if len(objects) != n {
		t.Fatalf("parsed %d objects of %d CREATE statements", len(objects), n)
	}
	path := filepath.Join(t.TempDir(), "sync.db")
	s := openPath(t, path)
	s.Close()
	db := openRaw(t, path)
	want := coreColumns()
	tables := 0
	for _, o := range objects {
		if got := db.int("SELECT count(*) FROM sqlite_master WHERE type=? AND name=?", o.kind, o.name); got != 1 {
			t.Errorf("%s %s not created", o.kind, o.name)
		}
		if o.kind != "table" {
			continue
		}
		tables++
		var names []string
		for _, c := range want[o.name] {
			names = append(names, c.name)
		}
		if got := columnNames(t, db, o.name); !slices.Equal(got, names) {
			t.Errorf("columns of %s = %v, coreColumns has %v", o.name, got, names)
		}
	}
	if tables != len(want) {
		t.Errorf("the DDL has %d tables, coreColumns %d", tables, len(want))
	}
}

// TestOpenReferenceDatabase: opening a database the reference created
// before 0.23 (no sync_commits.writer_version; here also before 0.15, no
// sync_clients.wire_version) adds the columns before the fence trigger
// needs them: syncgo appends work, and so do the reference's own appends
// (without writer_version) afterwards, while the fence still rejects them
// once raised; its client records keep wire version 1.
func TestOpenReferenceDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	sc := legacySchema(t)
	ref := openRaw(t, path)
	ref.script(strings.Replace(legacyCore, "wire_version INTEGER NOT NULL DEFAULT 1, ", "", 1) + currentItems)
	ref.exec("INSERT INTO sync_partition_registry(partition, log_epoch, last_authenticated_at_ms) VALUES ('p1', 'e1', 1)")
	w1 := item(t, sc, "i1", "p1", "one", 1)
	ref.putRow("p1", w1)
	ref.appendCommit("p1", "cc1", storetest.UpsertChange(w1))
	ref.exec(`INSERT INTO sync_clients(partition, client_id, actor_id, cursor, subscriptions, updated_at_ms) VALUES ('p1', 'c1', 'a1', 1, '[]', 1)`)
	if cols := columnNames(t, ref, "sync_clients"); slices.Contains(cols, "wire_version") {
		t.Fatalf("fixture sync_clients has wire_version: %v", cols)
	}
	ref.close()

	s := openPath(t, path)
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatalf("EnsureSchema on the reference database: %v", err)
	}
	w2 := item(t, sc, "i2", "p1", "two", 1)
	if seq := storetest.ApplyUpsert(t, s, "p1", w2); seq != 2 {
		t.Errorf("syncgo append got seq %d, want 2", seq)
	}
	rec, err := s.Client(ctx, "p1", "c1")
	if err != nil || rec.WireVersion != 1 || rec.Cursor != 1 {
		t.Errorf("reference client record = %+v, %v; want wire version 1, cursor 1", rec, err)
	}

	// The reference appends beside syncgo, as it always did.
	ref = openRaw(t, path)
	w3 := item(t, sc, "i3", "p1", "three", 1)
	ref.putRow("p1", w3)
	if seq := ref.appendCommit("p1", "cc3", storetest.UpsertChange(w3)); seq != 3 {
		t.Errorf("reference append got seq %d, want 3", seq)
	}
	commits, err := s.ReadCommits(ctx, "p1", 0, 3, 10)
	if err != nil || len(commits) != 3 || commits[2].ClientCommitID != "cc3" {
		t.Fatalf("commits after both servers appended = %v, %v", commits, err)
	}
	if got := ref.int("SELECT count(*) FROM sync_commits WHERE writer_version = 1"); got != 1 {
		t.Errorf("commits stamped with writer version 1 = %d, want 1 (syncgo's)", got)
	}
	// The fence, once raised, is enforced on the reference's appends.
	if _, err := s.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: "p1", Name: "proj", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}
	err = ref.c.exec(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms) VALUES ('p1', 4, 'c1', 'cc4', 'a1', 1)`)
	if !isFenceRejection(err) {
		t.Errorf("reference append under a fence = %v, want the fence's rejection", err)
	}
	w4 := item(t, sc, "i4", "p1", "four", 1)
	if seq := storetest.ApplyUpsert(t, s, "p1", w4); seq != 4 {
		t.Errorf("syncgo append under the fence got seq %d, want 4", seq)
	}
}

// TestOpenRepairsFencedDatabase: a database an earlier syncgo damaged
// (the fence trigger installed, sync_commits without writer_version:
// every append failed) is repaired by the open.
func TestOpenRepairsFencedDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sync.db")
	sc := legacySchema(t)
	ref := openRaw(t, path)
	ref.script(legacyCore + currentItems + `
CREATE TABLE sync_writer_fence(partition TEXT PRIMARY KEY, required_writer_version INTEGER NOT NULL);
CREATE TRIGGER sync_commits_writer_fence BEFORE INSERT ON sync_commits
WHEN EXISTS (SELECT 1 FROM sync_writer_fence WHERE partition = NEW.partition
  AND (NEW.writer_version IS NULL OR NEW.writer_version < required_writer_version))
BEGIN SELECT RAISE(ABORT, 'sync.storage.writer_fence_rejected'); END;`)
	if err := ref.c.exec(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms) VALUES ('p1', 1, 'c1', 'cc1', 'a1', 1)`); err == nil {
		t.Fatal("the damaged fixture accepts appends")
	}
	ref.close()
	s := openPath(t, path)
	if err := s.EnsureSchema(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	if seq := storetest.ApplyUpsert(t, s, "p1", item(t, sc, "i1", "p1", "one", 1)); seq != 1 {
		t.Errorf("append after the repair got seq %d", seq)
	}
}

// TestOpenFailureLeavesFileUntouched: an open that fails halfway through
// the core migration, or refuses a core table it cannot migrate, leaves
// the file byte for byte as it was (still in its own journal mode), and
// the next open works.
func TestOpenFailureLeavesFileUntouched(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sc := legacySchema(t)

	t.Run("failed step", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sync.db")
		ref := openRaw(t, path)
		ref.script(legacyCore + currentItems)
		ref.putRow("p1", item(t, sc, "i1", "p1", "one", 1))
		ref.close()
		before := fileState(t, path)
		injected := errors.New("injected")
		var ran []string
		_, err := open(ctx, Config{Path: path}, openHooks{coreStep: func(line string) error {
			ran = append(ran, line)
			if line == "add column sync_commits.writer_version" {
				return injected
			}
			return nil
		}})
		if !errors.Is(err, injected) {
			t.Fatalf("open = %v, want the injected failure", err)
		}
		if len(ran) < 2 {
			t.Errorf("the failure came at step %v: nothing before it was undone", ran)
		}
		if !bytes.Equal(fileState(t, path), before) {
			t.Error("a failed open changed the database file")
		}
		s := openPath(t, path)
		if err := s.EnsureSchema(ctx, sc); err != nil {
			t.Fatal(err)
		}
		storetest.ApplyUpsert(t, s, "p1", item(t, sc, "i2", "p1", "two", 1))
	})

	t.Run("refused table", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "sync.db")
		ref := openRaw(t, path)
		ref.script(strings.Replace(legacyCore, "actor_id TEXT NOT NULL,\n  created_at_ms", "created_at_ms", 1))
		if got := columnNames(t, ref, "sync_commits"); slices.Contains(got, "actor_id") {
			t.Fatalf("fixture sync_commits has actor_id: %v", got)
		}
		ref.close()
		before := fileState(t, path)
		_, err := Open(ctx, Config{Path: path})
		var se *store.Error
		if !errors.As(err, &se) || se.Code != store.CodePhysicalLayoutMismatch || se.Details["table"] != "sync_commits" || se.Details["column"] != "actor_id" {
			t.Fatalf("open = %v, want %s on sync_commits.actor_id", err, store.CodePhysicalLayoutMismatch)
		}
		if !bytes.Equal(fileState(t, path), before) {
			t.Error("a refused open changed the database file")
		}
	})
}

// TestOpenAtLayoutTakesNoWriteLock: opening (and ensuring the schema of)
// a database already at the layout writes nothing, so it succeeds while
// another process holds the write lock.
func TestOpenAtLayoutTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	sc := legacySchema(t)
	first := openPath(t, path)
	if err := first.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	storetest.ApplyUpsert(t, first, "p1", item(t, sc, "i1", "p1", "one", 1))
	first.Close()

	other := openRaw(t, path)
	other.exec("BEGIN IMMEDIATE")
	s, err := Open(ctx, Config{Path: path, BusyTimeoutMs: 100})
	if err != nil {
		t.Fatalf("open beside a writer: %v", err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Errorf("EnsureSchema at the same version beside a writer: %v", err)
	}
	if _, err := s.Row(ctx, "p1", "items", "i1"); err != nil {
		t.Errorf("read beside a writer: %v", err)
	}
	other.exec("ROLLBACK")
}

// TestUpgradeReferenceDatabase: a database of the reference 0.15 to 0.20
// line, with rows, a log, a client record and push results written as
// the reference writes them, is refused at its schema version until
// Upgrade adds _sync_column_versions and rebuilds its declared index;
// the refusal and PlanSchema write nothing, Upgrade is idempotent, and
// afterwards the store reads the rows, the commit window from the
// client's cursor and the push results.
func TestUpgradeReferenceDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	sc := legacySchema(t)
	ref := openRaw(t, path)
	ref.script(legacyCore + legacyItems)
	ref.exec("INSERT INTO sync_partition_registry(partition, log_epoch, last_authenticated_at_ms) VALUES ('p1', 'e1', 1), ('p2', 'e2', 1)")
	i1, i2, i3 := item(t, sc, "i1", "p1", "one", 1), item(t, sc, "i2", "p1", "two", 1), item(t, sc, "i3", "p2", "three", 1)
	ref.putRow("p1", i1)
	ref.putRow("p1", i2)
	ref.appendCommit("p1", "cc1", storetest.UpsertChange(i1), storetest.UpsertChange(i2))
	ref.putRow("p2", i3)
	ref.appendCommit("p2", "cc1", storetest.UpsertChange(i3))
	i1v2 := item(t, sc, "i1", "p1", "uno", 2)
	ref.putRow("p1", i1v2)
	ref.appendCommit("p1", "cc2", storetest.UpsertChange(i1v2))
	ref.deleteRow("p1", "i2")
	ref.appendCommit("p1", "cc3", storetest.DeleteChange(i2.Row))
	ref.exec(`INSERT INTO sync_clients(partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms)
VALUES ('p1', 'c1', 'a1', 2, 1, '[{"id":"s1","table":"items","scopes":{"p":["p1"]}}]', 5)`)
	serverRow := base64.StdEncoding.EncodeToString(i1.Payload)
	ref.exec(`INSERT INTO sync_push_results(partition, client_id, client_commit_id, result) VALUES
('p1', 'c1', 'cc2', '{"status":"applied","commitSeq":2,"recordedAtMs":7,"cacheIdentity":"id-2","results":[{"opIndex":0,"status":"applied"}]}'),
('p1', 'c1', 'cc9', '{"status":"rejected","recordedAtMs":8,"cacheIdentity":"id-9","results":[{"opIndex":0,"status":"conflict","code":"sync.version_conflict","message":"version conflict","serverVersion":1,"serverRow":"` + serverRow + `"},{"opIndex":1,"status":"error","code":"sync.forbidden","message":"forbidden","retryable":false,"details":{"reason":"scope"}}]}')`)
	ref.close()

	s := openPath(t, path)
	wantLines := []string{"add column items._sync_column_versions", "rebuild index sync_ix_by_title on items"}
	plan, err := s.PlanSchema(ctx, sc, nil)
	if err != nil || plan.Action != store.SchemaUpgradeNeeded || !slices.Equal(plan.Upgrade, wantLines) {
		t.Fatalf("PlanSchema = %+v, %v; want %s with %v", plan, err, store.SchemaUpgradeNeeded, wantLines)
	}
	before := fileState(t, path)
	err = s.EnsureSchema(ctx, sc)
	var se *store.Error
	if !errors.As(err, &se) || se.Code != store.CodePhysicalLayoutMismatch || se.Details["reason"] != "upgrade_required" ||
		!strings.Contains(se.Message, "syncgo migrate") {
		t.Fatalf("EnsureSchema before the upgrade = %v, want %s (upgrade_required) telling to run syncgo migrate", err, store.CodePhysicalLayoutMismatch)
	}
	if store.ErrorCode(plan.Refusal) != store.CodePhysicalLayoutMismatch {
		t.Errorf("PlanSchema's refusal = %v", plan.Refusal)
	}
	if !bytes.Equal(fileState(t, path), before) {
		t.Error("the refused EnsureSchema changed the database")
	}

	lines, err := s.Upgrade(ctx, sc)
	if err != nil || !slices.Equal(lines, wantLines) {
		t.Fatalf("Upgrade = %v, %v; want %v", lines, err, wantLines)
	}
	if lines, err := s.Upgrade(ctx, sc); err != nil || len(lines) != 0 {
		t.Errorf("second Upgrade = %v, %v; want nothing", lines, err)
	}
	if plan, err := s.PlanSchema(ctx, sc, nil); err != nil || plan.Action != store.SchemaNone || len(plan.Upgrade) != 0 {
		t.Errorf("PlanSchema after the upgrade = %+v, %v", plan, err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatalf("EnsureSchema after the upgrade: %v", err)
	}

	got, err := s.Row(ctx, "p1", "items", "i1")
	if err != nil || got.ServerVersion != 2 || !bytes.Equal(got.Payload, i1v2.Payload) || got.ColumnVersions != nil {
		t.Errorf("row i1 = %+v, %v; want version 2 with its payload and no column versions", got, err)
	}
	if _, err := s.Row(ctx, "p1", "items", "i2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted row i2 = %v", err)
	}
	rows, err := s.ScanRows(ctx, "p2", store.RowScanQuery{Table: "items", Scopes: wire.ScopeMap{{Key: "p", Values: []string{"p2"}}}, Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].RowID != "i3" {
		t.Errorf("scan of p2 = %v, %v", rows, err)
	}
	rec, err := s.Client(ctx, "p1", "c1")
	if err != nil || rec.Cursor != 1 || rec.WireVersion != 2 || len(rec.Subscriptions) != 1 || rec.Subscriptions[0].Table != "items" {
		t.Fatalf("client c1 = %+v, %v", rec, err)
	}
	part, err := s.Partition(ctx, "p1")
	if err != nil || part.MaxCommitSeq != 3 {
		t.Fatalf("partition p1 = %+v, %v", part, err)
	}
	win, err := s.ReadCommitWindow(ctx, "p1", store.CommitWindowQuery{Table: "items",
		Scopes: wire.ScopeMap{{Key: "p", Values: rec.Subscriptions[0].Scopes["p"]}}, AfterSeq: rec.Cursor, ThroughSeq: part.MaxCommitSeq})
	if err != nil || !win.Complete || len(win.Commits) != 2 {
		t.Fatalf("window after the client's cursor = %+v, %v; want commits 2 and 3", win, err)
	}
	if c := win.Commits[0]; c.Seq != 2 || c.ClientCommitID != "cc2" || len(c.Changes) != 1 || !bytes.Equal(c.Changes[0].Payload, i1v2.Payload) || c.Changes[0].RowVersion != 2 {
		t.Errorf("commit 2 = %+v", c)
	}
	if c := win.Commits[1]; c.Seq != 3 || len(c.Changes) != 1 || c.Changes[0].Op != wire.OpDelete || c.Changes[0].RowID != "i2" {
		t.Errorf("commit 3 = %+v", c)
	}
	applied, err := s.PushResult(ctx, "p1", "c1", "cc2")
	if err != nil || applied.Status != wire.PushApplied || applied.CommitSeq != 2 || applied.CacheIdentity != "id-2" {
		t.Errorf("applied push result = %+v, %v", applied, err)
	}
	rejected, err := s.PushResult(ctx, "p1", "c1", "cc9")
	if err != nil || rejected.Status != wire.PushRejected || len(rejected.Results) != 2 ||
		rejected.Results[0].Status != wire.OpConflict || !bytes.Equal(rejected.Results[0].ServerRow, i1.Payload) ||
		len(rejected.Details) != 1 || rejected.Details[0].DetailsJSON != `{"reason":"scope"}` {
		t.Errorf("rejected push result = %+v, %v", rejected, err)
	}

	// The index is the storage's now: unique per partition.
	other := item(t, sc, "i9", "p1", "uno", 1) // i1's scope and title, in partition p2
	if seq := storetest.ApplyUpsert(t, s, "p2", other); seq != 2 {
		t.Errorf("append in p2 got seq %d, want 2", seq)
	}
	dup := item(t, sc, "i8", "p1", "uno", 1)
	err = s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, dup) })
	var ce *store.ConstraintError
	if !errors.As(err, &ce) || ce.Constraint != schema.PhysicalIndexName("by_title") {
		t.Errorf("duplicate title in one partition = %v, want a violation of the declared index", err)
	}
	// A client record without a cursor is stored as the reference's NOT
	// NULL column takes it.
	if err := s.PutClient(ctx, "p1", store.ClientRecord{ClientID: "c2", ActorID: "a2", WireVersion: 3, Cursor: -1}); err != nil {
		t.Errorf("client record without a cursor: %v", err)
	}
	if rec, err := s.Client(ctx, "p1", "c2"); err != nil || rec.Cursor != -1 {
		t.Errorf("client c2 = %+v, %v", rec, err)
	}
}
