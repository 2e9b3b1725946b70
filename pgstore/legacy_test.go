package pgstore

import (
	"context"
	"encoding/base64"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A database of the reference 0.15 to 0.20 line (release 0.15.48), built
// with DDL of our own that has its layout: the core tables of its
// POSTGRES_DDL before 0.21 and 0.23 (no sync_commits.writer_version, no
// sync_tombstones, checkpoint or fence table, no fence function or
// trigger; sync_reactions, to which pgstore adds its status-led indexes,
// and sync_blob_refs, which pgstore does not create;
// sync_row_scopes.row_id in the database collation), app tables without
// _sync_column_versions whose non-nullable columns are NOT NULL,
// and declared indexes that do not lead with _sync_partition.
const legacyCoreDDL = `
CREATE TABLE sync_partitions(partition TEXT PRIMARY KEY,
  max_commit_seq BIGINT NOT NULL DEFAULT 0, horizon_seq BIGINT NOT NULL DEFAULT 0);
CREATE TABLE sync_partition_registry(partition TEXT PRIMARY KEY, log_epoch TEXT NOT NULL,
  epoch_required BOOLEAN NOT NULL DEFAULT FALSE, last_authenticated_at_ms BIGINT NOT NULL);
CREATE TABLE sync_row_scopes(partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, row_id TEXT NOT NULL, PRIMARY KEY(partition, tbl, var, value, row_id));
CREATE TABLE sync_commits(partition TEXT NOT NULL, commit_seq BIGINT NOT NULL,
  client_id TEXT NOT NULL, client_commit_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL, PRIMARY KEY(partition, commit_seq));
CREATE INDEX sync_commits_by_time ON sync_commits(partition, created_at_ms);
CREATE TABLE sync_changes(partition TEXT NOT NULL, commit_seq BIGINT NOT NULL, idx INTEGER NOT NULL,
  tbl TEXT NOT NULL, row_id TEXT NOT NULL, op SMALLINT NOT NULL, row_version BIGINT,
  scopes JSONB NOT NULL, payload BYTEA, PRIMARY KEY(partition, commit_seq, idx));
CREATE INDEX sync_changes_by_table ON sync_changes(partition, commit_seq, tbl, idx);
CREATE TABLE sync_change_scopes(partition TEXT NOT NULL, tbl TEXT NOT NULL, var TEXT NOT NULL,
  value TEXT NOT NULL, commit_seq BIGINT NOT NULL, PRIMARY KEY(partition, tbl, var, value, commit_seq));
CREATE TABLE sync_push_results(partition TEXT NOT NULL, client_id TEXT NOT NULL,
  client_commit_id TEXT NOT NULL, result JSONB NOT NULL, PRIMARY KEY(partition, client_id, client_commit_id));
CREATE TABLE sync_reactions(partition TEXT NOT NULL, idempotency_key TEXT NOT NULL,
  type TEXT NOT NULL, version INTEGER NOT NULL, payload JSONB NOT NULL,
  source_client_id TEXT NOT NULL, source_client_commit_id TEXT NOT NULL,
  source_commit_seq BIGINT NOT NULL, created_at_ms BIGINT NOT NULL,
  available_at_ms BIGINT NOT NULL, status TEXT NOT NULL,
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
  lease_owner TEXT, lease_expires_at_ms BIGINT, completed_at_ms BIGINT, last_failure JSONB,
  PRIMARY KEY(partition, idempotency_key),
  CHECK(status IN ('pending', 'leased', 'completed', 'dead-letter')));
CREATE INDEX sync_reactions_due ON sync_reactions(partition, status, available_at_ms, created_at_ms, idempotency_key);
CREATE TABLE sync_clients(partition TEXT NOT NULL, client_id TEXT NOT NULL, actor_id TEXT NOT NULL,
  wire_version INTEGER NOT NULL DEFAULT 1, cursor BIGINT NOT NULL, subscriptions JSONB NOT NULL,
  updated_at_ms BIGINT NOT NULL, PRIMARY KEY(partition, client_id));
CREATE TABLE sync_blob_refs(partition TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
  blob_id TEXT NOT NULL, PRIMARY KEY(partition, tbl, row_id, blob_id));
CREATE INDEX sync_blob_refs_by_blob ON sync_blob_refs(partition, blob_id);
CREATE TABLE sync_schema_meta(id INTEGER PRIMARY KEY CHECK (id = 1), schema_version BIGINT NOT NULL,
  layouts TEXT NOT NULL DEFAULT '{}');
CREATE TABLE "tasks" ("_sync_partition" TEXT NOT NULL, "_sync_row_id" TEXT NOT NULL,
  "id" TEXT NOT NULL, "project_id" TEXT NOT NULL, "owner_id" TEXT NOT NULL, "title" TEXT, "rank" BIGINT,
  "meta" JSONB, "done" BOOLEAN, "score" DOUBLE PRECISION, "blob" BYTEA,
  "_sync_server_version" BIGINT NOT NULL, "_sync_scopes" JSONB NOT NULL, "_sync_payload" BYTEA NOT NULL,
  PRIMARY KEY ("_sync_partition", "_sync_row_id"));
CREATE UNIQUE INDEX "sync_ix_tasks_by_title" ON "tasks" ("title");
CREATE INDEX "sync_ix_tasks_by_rank" ON "tasks" ("rank");
`

// legacyWriter writes like the reference 0.15 line: JSON bound as text
// into JSONB columns (stored as JSONB strings), commits without a writer
// version, a sequence allocated on sync_partitions.
type legacyWriter struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func (l legacyWriter) exec(sql string, args ...any) {
	l.t.Helper()
	if _, err := l.pool.Exec(context.Background(), sql, args...); err != nil {
		l.t.Fatalf("%s: %v", sql, err)
	}
}

// upsert writes a current row and its scope index entries.
func (l legacyWriter) upsert(partition string, r task, w store.RowWrite) {
	l.t.Helper()
	l.exec(`INSERT INTO tasks(_sync_partition, _sync_row_id, id, project_id, owner_id, title, rank,
	  _sync_server_version, _sync_scopes, _sync_payload) VALUES ($1, $2, $2, $3, $4, $5, $6, $7, to_jsonb($8::text), $9)
	  ON CONFLICT (_sync_partition, _sync_row_id) DO UPDATE SET title = EXCLUDED.title, rank = EXCLUDED.rank,
	  _sync_server_version = EXCLUDED._sync_server_version, _sync_scopes = EXCLUDED._sync_scopes,
	  _sync_payload = EXCLUDED._sync_payload`,
		partition, r.id, r.project, r.owner, r.title, r.rank, w.ServerVersion, string(store.EncodeScopes(w.Scopes)), w.Payload)
	for _, sc := range w.Scopes {
		l.exec(`INSERT INTO sync_row_scopes VALUES ($1, 'tasks', $2, $3, $4) ON CONFLICT DO NOTHING`, partition, sc.Key, sc.Value, r.id)
	}
}

// commit appends a commit of changes and returns its sequence.
func (l legacyWriter) commit(partition, clientCommitID string, changes ...store.Change) int64 {
	l.t.Helper()
	var seq int64
	err := l.pool.QueryRow(context.Background(), `INSERT INTO sync_partitions(partition, max_commit_seq) VALUES ($1, 1)
	  ON CONFLICT (partition) DO UPDATE SET max_commit_seq = sync_partitions.max_commit_seq + 1
	  RETURNING max_commit_seq`, partition).Scan(&seq)
	if err != nil {
		l.t.Fatal(err)
	}
	l.exec(`INSERT INTO sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)
	  VALUES ($1, $2, 'c1', $3, 'a1', 1000)`, partition, seq, clientCommitID)
	for i, ch := range changes {
		var version *int64
		if ch.Op == wire.OpUpsert {
			version = &ch.RowVersion
		}
		l.exec(`INSERT INTO sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
		  VALUES ($1, $2, $3, $4, $5, $6, $7, to_jsonb($8::text), $9)`,
			partition, seq, i, ch.Table, ch.RowID, int16(ch.Op), version, string(store.EncodeScopes(ch.Scopes)), ch.Payload)
		for _, sc := range ch.Scopes {
			l.exec(`INSERT INTO sync_change_scopes VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, partition, ch.Table, sc.Key, sc.Value, seq)
		}
	}
	return seq
}

// legacyDatabase builds the database in a fresh schema: three commits in
// partition p (t1; t2 and t3; t1 again and t3 deleted), the journal, a
// client whose cursor is at 1, the registry entry and the marker of c.
func legacyDatabase(t *testing.T, c *schema.Compiled) (name string, w map[string]store.RowWrite) {
	t.Helper()
	name = newSchema(t)
	l := legacyWriter{t, newPool(t, name, 2)}
	l.exec(legacyCoreDDL)
	layout, err := c.Layout().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	l.exec(`INSERT INTO sync_schema_meta(id, schema_version, layouts) VALUES (1, $1, $2)`, int64(c.Version()), string(layout))
	l.exec(`INSERT INTO sync_partition_registry VALUES ('p', 'epoch-1', FALSE, 1000)`)
	rows := map[string]task{
		"t1": {id: "t1", project: "p1", owner: "o1", title: ptr("one")},
		"t2": {id: "t2", project: "p1", owner: "o2", rank: ptr[int64](2)},
		"t3": {id: "t3", project: "p1", owner: "o1"},
	}
	w = map[string]store.RowWrite{"t1": rows["t1"].write(t, c, 1), "t2": rows["t2"].write(t, c, 2), "t3": rows["t3"].write(t, c, 2)}
	l.upsert("p", rows["t1"], w["t1"])
	l.commit("p", "cc1", upsertChange(w["t1"]))
	l.upsert("p", rows["t2"], w["t2"])
	l.upsert("p", rows["t3"], w["t3"])
	l.commit("p", "cc2", upsertChange(w["t2"]), upsertChange(w["t3"]))
	t1 := rows["t1"]
	t1.title = ptr("one, edited")
	w["t1"] = t1.write(t, c, 3)
	l.upsert("p", t1, w["t1"])
	l.exec(`DELETE FROM tasks WHERE _sync_row_id = 't3'`)
	l.exec(`DELETE FROM sync_row_scopes WHERE row_id = 't3'`)
	l.commit("p", "cc3", upsertChange(w["t1"]),
		store.Change{Table: "tasks", RowID: "t3", Op: wire.OpDelete, Scopes: w["t3"].Scopes})
	for i, id := range []string{"cc1", "cc2", "cc3"} {
		l.exec(`INSERT INTO sync_push_results VALUES ('p', 'c1', $1, to_jsonb($2::text))`, id,
			`{"status":"applied","commitSeq":`+strconv.Itoa(i+1)+`,"recordedAtMs":1000,"results":[{"opIndex":0,"status":"applied"}]}`)
	}
	l.exec(`INSERT INTO sync_push_results VALUES ('p', 'c1', 'cc4', to_jsonb($1::text))`,
		`{"status":"rejected","recordedAtMs":1001,"results":[{"opIndex":0,"status":"conflict","code":"sync.conflict",`+
			`"message":"the row changed","serverVersion":3,"serverRow":"`+base64.StdEncoding.EncodeToString(w["t1"].Payload)+`"}]}`)
	l.exec(`INSERT INTO sync_clients VALUES ('p', 'c1', 'a1', 2, 1, to_jsonb($1::text), 1000)`,
		`[{"id":"s1","table":"tasks","scopes":{"project_id":["p1"]}}]`)
	return name, w
}

// rowVersions is the xmin of every row of the tables a rewrite would
// touch: equal before and after means no row was written.
func rowVersions(t *testing.T, s *Store) string {
	t.Helper()
	var out string
	err := s.pool.QueryRow(context.Background(), `SELECT concat_ws(' | ',
	  (SELECT string_agg(_sync_row_id || ':' || xmin::text, ',' ORDER BY _sync_row_id) FROM tasks),
	  (SELECT string_agg(commit_seq || '/' || idx || ':' || xmin::text, ',' ORDER BY commit_seq, idx) FROM sync_changes),
	  (SELECT string_agg(commit_seq || ':' || xmin::text, ',' ORDER BY commit_seq) FROM sync_commits),
	  (SELECT string_agg(client_commit_id || ':' || xmin::text, ',' ORDER BY client_commit_id) FROM sync_push_results),
	  (SELECT string_agg(client_id || ':' || xmin::text, ',' ORDER BY client_id) FROM sync_clients))`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// legacyCoreLines are the core steps of a legacy database.
func legacyCoreLines() []string {
	return []string{
		"add column sync_commits.writer_version", "create table sync_tombstones",
		"create table sync_backfill_checkpoints", "create table sync_writer_fence",
		"create function syncular_writer_fence()", "create trigger sync_commits_writer_fence",
		"create table sync_leases", "create table sync_lease_revocations",
		// The segment and blob stores' tables (the reference keeps
		// sync_blob_refs in its core DDL already).
		"create table sync_segments", "create index sync_segments_by_expiry",
		"create table sync_segment_publications", "create index sync_segment_publications_by_key",
		"create index sync_segment_publications_by_expiry", "create table sync_blob_objects",
		"create index sync_blob_objects_by_upload", "create index sync_blob_objects_by_age",
		"create table sync_blob_chunks", "create index sync_blob_chunks_by_age",
		"create index sync_reactions_claim", "create index sync_reactions_expiry", "create index sync_reactions_terminal",
		"create index sync_row_scopes_by_row",
		"create table sync_segment_bodies", "create index sync_segment_bodies_by_expiry",
	}
}

// legacyAppLines are the upgrade steps of its app table.
func legacyAppLines() []string {
	return []string{
		"add column tasks._sync_column_versions",
		"rebuild index sync_ix_tasks_by_title on tasks", "rebuild index sync_ix_tasks_by_rank on tasks",
	}
}

// wantUpgradeRefusal checks the refusal of a database that needs Upgrade.
func wantUpgradeRefusal(t *testing.T, what string, err error, lines []string) {
	t.Helper()
	var se *store.Error
	if !errors.As(err, &se) || se.Code != store.CodePhysicalLayoutMismatch || se.Details["reason"] != "upgrade_required" ||
		!strings.Contains(se.Message, "syncgo migrate") || !reflect.DeepEqual(se.Details["upgrade"], lines) {
		t.Errorf("%s = %v (%+v); want an upgrade_required refusal listing %v", what, err, se, lines)
	}
}

// TestUpgradeReferenceLegacyDatabase: a database the reference 0.15 line
// wrote is planned and refused without being touched (read-only and
// read-write stores alike), Upgrade adds what is missing in one
// transaction without rewriting a row, and the store then serves it: the
// rows, the client's commit window from its cursor (incremental), the
// commit log, the journal, and new writes that continue the sequence.
func TestUpgradeReferenceLegacyDatabase(t *testing.T) {
	t.Parallel()
	c := testSchema(t, 1)
	name, w := legacyDatabase(t, c)
	ctx := context.Background()

	// A read-only store plans and refuses; it writes nothing, not even
	// the core tables.
	url := testURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	ro, err := Open(ctx, Config{URL: url + sep + "search_path=" + name, ReadOnly: true})
	if err != nil {
		t.Fatalf("Open(ReadOnly): %v", err)
	}
	defer ro.Close()
	plan, err := ro.PlanSchema(ctx, c, nil)
	all := append(legacyCoreLines(), legacyAppLines()...)
	if err != nil || plan.Action != store.SchemaUpgradeNeeded || !slices.Equal(plan.Upgrade, all) {
		t.Errorf("PlanSchema(read-only) = %+v, %v; want upgrade_needed with %v", plan, err, all)
	}
	wantUpgradeRefusal(t, "PlanSchema refusal", plan.Refusal, all)
	wantUpgradeRefusal(t, "EnsureSchema(read-only)", ro.EnsureSchema(ctx, c), all)
	if _, err := ro.Upgrade(ctx, c); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Upgrade(read-only) = %v; want ErrReadOnly", err)
	}
	if steps, err := planCore(ctx, ro.pool); err != nil || !slices.Equal(stepLines(steps), legacyCoreLines()) {
		t.Fatalf("core plan after the read-only store = %v, %v: it wrote", stepLines(steps), err)
	}

	// A read-write store brings the core tables to the layout at Open,
	// then refuses the app tables without touching them.
	s := openIn(t, name, Config{})
	if v := queryInt(t, s, `SELECT count(*) FROM sync_commits WHERE writer_version IS NULL`); v != 3 {
		t.Errorf("legacy commits with a NULL writer_version: %d", v)
	}
	plan, err = s.PlanSchema(ctx, c, nil)
	if err != nil || plan.Action != store.SchemaUpgradeNeeded || !slices.Equal(plan.Upgrade, legacyAppLines()) {
		t.Errorf("PlanSchema = %+v, %v; want upgrade_needed with %v", plan, err, legacyAppLines())
	}
	before := rowVersions(t, s)
	indexes := func() string {
		var defs string
		if err := s.pool.QueryRow(ctx, `SELECT string_agg(indexdef, '; ' ORDER BY indexname) FROM pg_indexes
			WHERE schemaname = current_schema() AND tablename = 'tasks'`).Scan(&defs); err != nil {
			t.Fatal(err)
		}
		return defs
	}
	legacyIndexes := indexes()
	for range 2 {
		wantUpgradeRefusal(t, "EnsureSchema", s.EnsureSchema(ctx, c), legacyAppLines())
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'tasks'::regclass AND attname = '_sync_column_versions'`); n != 0 ||
		indexes() != legacyIndexes || rowVersions(t, s) != before {
		t.Fatal("the refused EnsureSchema changed the database")
	}

	lines, err := s.Upgrade(ctx, c)
	if err != nil || !slices.Equal(lines, legacyAppLines()) {
		t.Fatalf("Upgrade = %v, %v; want %v", lines, err, legacyAppLines())
	}
	if lines, err := s.Upgrade(ctx, c); err != nil || len(lines) != 0 {
		t.Errorf("second Upgrade = %v, %v; want nothing", lines, err)
	}
	if after := rowVersions(t, s); after != before {
		t.Errorf("Upgrade rewrote rows:\nbefore %s\nafter  %s", before, after)
	}
	ensure(t, s, c)
	if plan, err := s.PlanSchema(ctx, c, nil); err != nil || plan.Action != store.SchemaNone || len(plan.Upgrade) != 0 {
		t.Errorf("PlanSchema after Upgrade = %+v, %v", plan, err)
	}
	if err := ro.EnsureSchema(ctx, c); err != nil {
		t.Errorf("EnsureSchema(read-only) after Upgrade: %v", err)
	}

	// Rows.
	r, err := s.Row(ctx, "p", "tasks", "t1")
	if err != nil || r.ServerVersion != 3 || string(r.Payload) != string(w["t1"].Payload) ||
		!reflect.DeepEqual(r.Scopes, w["t1"].Scopes) || r.ColumnVersions != nil {
		t.Errorf("Row(t1) = %+v, %v", r, err)
	}
	two := wire.ScopeMap{{Key: "owner_id", Values: []string{"o2"}}, {Key: "project_id", Values: []string{"p1"}}}
	rows, err := s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: two, Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].RowID != "t2" {
		t.Errorf("ScanRows = %+v, %v; want t2", rows, err)
	}

	// The client's window from its cursor: commits 2 and 3 only.
	cl, err := s.Client(ctx, "p", "c1")
	want := []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}
	if err != nil || cl.Cursor != 1 || cl.WireVersion != 2 || !reflect.DeepEqual(cl.Subscriptions, want) {
		t.Fatalf("Client = %+v, %v", cl, err)
	}
	p, err := s.Partition(ctx, "p")
	if err != nil || p.MaxCommitSeq != 3 || p.LogEpoch != "epoch-1" {
		t.Fatalf("Partition = %+v, %v", p, err)
	}
	q := store.CommitWindowQuery{Table: "tasks", Scopes: scope("project_id", "p1"), AfterSeq: cl.Cursor, ThroughSeq: p.MaxCommitSeq}
	win, err := s.ReadCommitWindow(ctx, "p", q)
	if err != nil || !win.Complete || len(win.Commits) != 2 || win.Commits[0].Seq != 2 || win.Commits[1].Seq != 3 {
		t.Fatalf("ReadCommitWindow from the cursor = %+v, %v; want commits 2 and 3", win, err)
	}
	del := win.Commits[1].Changes[1]
	if len(win.Commits[0].Changes) != 2 || string(win.Commits[1].Changes[0].Payload) != string(w["t1"].Payload) ||
		del.Op != wire.OpDelete || del.RowID != "t3" || !reflect.DeepEqual(del.Scopes, w["t3"].Scopes) {
		t.Errorf("window changes = %+v", win.Commits)
	}
	commits, err := s.ReadCommits(ctx, "p", 0, 3, 10)
	if err != nil || len(commits) != 3 || commits[2].ClientCommitID != "cc3" {
		t.Errorf("ReadCommits = %+v, %v", commits, err)
	}

	// The journal, applied and rejected.
	rec, err := s.PushResult(ctx, "p", "c1", "cc2")
	if err != nil || rec.Status != wire.PushApplied || rec.CommitSeq != 2 || len(rec.Results) != 1 {
		t.Errorf("PushResult(cc2) = %+v, %v", rec, err)
	}
	rec, err = s.PushResult(ctx, "p", "c1", "cc4")
	if err != nil || rec.Status != wire.PushRejected || rec.Results[0].Status != wire.OpConflict ||
		rec.Results[0].ServerVersion != 3 || string(rec.Results[0].ServerRow) != string(w["t1"].Payload) {
		t.Errorf("PushResult(cc4) = %+v, %v", rec, err)
	}

	// New writes continue the sequence, stamped, with the per-partition
	// unique index (the legacy one was global: "one, edited" exists in p).
	t4 := task{id: "t4", project: "p1", owner: "o1", title: ptr("four")}.write(t, c, 4)
	if seq := apply(t, s, "p", t4); seq != 4 {
		t.Errorf("new commit seq = %d; want 4", seq)
	}
	apply(t, s, "q", task{id: "t1", project: "p1", owner: "o1", title: ptr("one, edited")}.write(t, c, 1))
	if v := queryInt(t, s, `SELECT writer_version FROM sync_commits WHERE partition = 'p' AND commit_seq = 4`); v != 1 {
		t.Errorf("writer_version of the new commit = %d", v)
	}
	win, err = s.ReadCommitWindow(ctx, "p", store.CommitWindowQuery{Table: "tasks", Scopes: scope("project_id", "p1"), AfterSeq: 3, ThroughSeq: 4})
	if err != nil || len(win.Commits) != 1 || win.Commits[0].Seq != 4 {
		t.Errorf("ReadCommitWindow after 3 = %+v, %v; want commit 4", win, err)
	}
}
