package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// TestPlanSchemaActions: PlanSchema reports what EnsureSchemaWith would do
// (the action and the refusal), and writes nothing.
func TestPlanSchemaActions(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	v1 := testSchema(t, 1)
	v2 := testSchema(t, 2, schema.String("added").Null())
	plan := func(c *schema.Compiled, decls ...store.CheckpointDeclaration) store.SchemaPlan {
		t.Helper()
		p, err := s.PlanSchema(ctx, c, decls)
		if err != nil {
			t.Fatalf("PlanSchema(v%d): %v", c.Version(), err)
		}
		if len(p.Upgrade) > 0 {
			t.Errorf("PlanSchema(v%d) upgrade lines %v on a syncgo database", c.Version(), p.Upgrade)
		}
		return p
	}
	if p := plan(v1); p.Action != store.SchemaCreate || p.Refusal != nil {
		t.Errorf("empty database: %+v", p)
	}
	ensure(t, s, v1)
	if p := plan(v1); p.Action != store.SchemaNone {
		t.Errorf("same version: %+v", p)
	}
	if p := plan(testSchema(t, 1, schema.String("extra").Null())); p.Action != store.SchemaRefuse ||
		store.ErrorCode(p.Refusal) != store.CodeStoredLayoutMismatch {
		t.Errorf("same version, other layout: %+v", p)
	}
	if p := plan(v2); p.Action != store.SchemaMigrate {
		t.Errorf("older marker: %+v", p)
	}
	narrower, err := schema.New(2).Table("tasks", "id", schema.String("id"), schema.String("project_id")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	if p := plan(narrower); p.Action != store.SchemaRefuse || store.ErrorCode(p.Refusal) != store.CodeSchemaMigrationPending {
		t.Errorf("a bump that is not append-only: %+v", p)
	}
	if m, _ := s.Marker(ctx); m.SchemaVersion != 1 {
		t.Fatalf("PlanSchema wrote the marker: %+v", m)
	}
	decl := store.CheckpointDeclaration{Partition: "p", Name: "cp", SchemaVersion: 2}
	if _, err := s.DeclareCheckpoint(ctx, decl, 1); err != nil {
		t.Fatal(err)
	}
	if p := plan(v2); p.Action != store.SchemaRefuse || store.ErrorCode(p.Refusal) != store.CodeCheckpointIncomplete {
		t.Errorf("undeclared incomplete checkpoint: %+v", p)
	}
	if p := plan(v2, decl); p.Action != store.SchemaMigrate {
		t.Errorf("declared checkpoint: %+v", p)
	}
	if err := s.EnsureSchemaWith(ctx, v2, []store.CheckpointDeclaration{decl}); err != nil {
		t.Fatal(err)
	}
	if p := plan(v1); p.Action != store.SchemaRefuse || !errors.Is(p.Refusal, store.ErrSchemaNewer) {
		t.Errorf("newer marker: %+v", p)
	}
}

// TestReadOnly: a read-only store creates nothing and writes nothing, on
// an empty database and on a served one, where it reads.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	ctx := context.Background()
	c := testSchema(t, 1)
	url := testURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	ro, err := Open(ctx, Config{URL: url + sep + "search_path=" + name, ReadOnly: true, MaxConns: 2})
	if err != nil {
		t.Fatalf("Open(ReadOnly) on an empty database: %v", err)
	}
	defer ro.Close()
	if n := queryInt(t, ro, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace`, name); n != 0 {
		t.Errorf("Open(ReadOnly) created %d relations", n)
	}
	p, err := ro.PlanSchema(ctx, c, nil)
	if err != nil || p.Action != store.SchemaCreate || len(p.Upgrade) != 37 || p.Upgrade[0] != "create table sync_partitions" {
		t.Errorf("PlanSchema(empty) = %+v, %v; want create with the 37 core steps", p, err)
	}
	if err := ro.EnsureSchema(ctx, c); !errors.Is(err, ErrReadOnly) {
		t.Errorf("EnsureSchema(empty, read-only) = %v; want ErrReadOnly", err)
	}
	// The sessions of a pool Open created are read-only too.
	_, err = ro.Pool().Exec(ctx, `CREATE TABLE x (a int)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("DDL on a read-only store's pool = %v; want read_only_sql_transaction", err)
	}

	s := openIn(t, name, Config{})
	ensure(t, s, c)
	apply(t, s, "p", task{id: "t1", project: "p1", owner: "o1"}.write(t, c, 1))
	before := queryInt(t, s, `SELECT max_commit_seq FROM sync_partitions WHERE partition = 'p'`)

	ro2 := openIn(t, name, Config{ReadOnly: true}) // on a pool Open did not create
	for _, st := range []*Store{ro, ro2} {
		if err := st.EnsureSchema(ctx, c); err != nil {
			t.Errorf("EnsureSchema(read-only, same version) = %v", err)
		}
		if _, err := st.Row(ctx, "p", "tasks", "t1"); err != nil {
			t.Errorf("Row(read-only) = %v", err)
		}
		if p, err := st.PlanSchema(ctx, c, nil); err != nil || p.Action != store.SchemaNone {
			t.Errorf("PlanSchema(read-only) = %+v, %v", p, err)
		}
		writes := map[string]error{
			"Write": st.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
				_, err := tx.AppendCommit(ctx, commitOf("x"))
				return err
			}),
			"EnsureSchema(v2)": st.EnsureSchema(ctx, testSchema(t, 2)),
			"PutClient":        st.PutClient(ctx, "p", store.ClientRecord{ClientID: "c", ActorID: "a"}),
			"RotateLogEpoch":   st.RotateLogEpoch(ctx, "p", "e2", 1),
		}
		_, writes["TouchPartition"] = st.TouchPartition(ctx, "p", 1, "e")
		_, writes["DeclareCheckpoint"] = st.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: "p", Name: "n", SchemaVersion: 2}, 1)
		_, writes["PruneThrough"] = st.PruneThrough(ctx, "p", "", 1)
		_, writes["Upgrade"] = st.Upgrade(ctx, c)
		for what, err := range writes {
			if !errors.Is(err, ErrReadOnly) {
				t.Errorf("%s on a read-only store = %v; want ErrReadOnly", what, err)
			}
		}
	}
	if after := queryInt(t, s, `SELECT max_commit_seq FROM sync_partitions WHERE partition = 'p'`); after != before {
		t.Errorf("max_commit_seq %d → %d through read-only stores", before, after)
	}
	if m, _ := s.Marker(ctx); m.SchemaVersion != 1 {
		t.Errorf("marker after read-only stores: %+v", m)
	}
}

// TestUpgradeMarkerWithoutLayouts: a marker table without the layouts
// column (an older reference server) is planned from the version alone; a
// read-write Open adds the column, EnsureSchema refuses until Upgrade
// records the running layouts, then serves.
func TestUpgradeMarkerWithoutLayouts(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	ctx := context.Background()
	c := testSchema(t, 1)
	s := openIn(t, name, Config{})
	ensure(t, s, c)
	if _, err := s.pool.Exec(ctx, `ALTER TABLE sync_schema_meta DROP COLUMN layouts`); err != nil {
		t.Fatal(err)
	}
	record := "record the layouts of schema version 1 in sync_schema_meta"
	ro := openIn(t, name, Config{ReadOnly: true})
	p, err := ro.PlanSchema(ctx, c, nil)
	if err != nil || p.Action != store.SchemaUpgradeNeeded || len(p.Upgrade) != 2 ||
		p.Upgrade[0] != "add column sync_schema_meta.layouts" || p.Upgrade[1] != record {
		t.Errorf("PlanSchema(read-only) = %+v, %v", p, err)
	}
	s2 := openIn(t, name, Config{})
	wantUpgradeRefusal(t, "EnsureSchema", s2.EnsureSchema(ctx, c), []string{record})
	lines, err := s2.Upgrade(ctx, c)
	if err != nil || len(lines) != 1 || lines[0] != record {
		t.Fatalf("Upgrade = %v, %v", lines, err)
	}
	ensure(t, s2, c)
	if m, err := s2.Marker(ctx); err != nil || m.SchemaVersion != 1 || len(m.Layout) != 1 {
		t.Errorf("Marker after Upgrade = %+v, %v", m, err)
	}
}
