package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestEnsureSchemaCreatesTables(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ensure(t, s, c) // equal version: checked, nothing written
	ctx := context.Background()
	m, err := s.Marker(ctx)
	if err != nil || m.SchemaVersion != 1 {
		t.Fatalf("Marker = %+v, %v", m, err)
	}
	if _, bad := schema.StoredLayoutMismatch(m.Layout, c.Layout()); bad {
		t.Errorf("stored layout %+v", m.Layout)
	}
	want, _ := c.Layout().MarshalJSON()
	var stored string
	if err := s.pool.QueryRow(ctx, `SELECT layouts FROM sync_schema_meta`).Scan(&stored); err != nil || stored != string(want) {
		t.Errorf("layouts = %s, %v; want %s", stored, err, want)
	}
	// Columns, types, nullability (app columns always nullable).
	cols, err := physicalColumns(ctx, s.pool, c)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]physicalColumn{
		"_sync_partition": {"text", true, 1}, "_sync_row_id": {"text", true, 2}, "id": {"text", false, 0},
		"meta": {"jsonb", false, 0}, "rank": {"bigint", false, 0}, "score": {"double precision", false, 0},
		"done": {"boolean", false, 0}, "blob": {"bytea", false, 0}, "_sync_scopes": {"jsonb", true, 0},
		"_sync_column_versions": {"bytea", false, 0},
	} {
		if got := cols["tasks"][name]; got != want {
			t.Errorf("column %s = %+v; want %+v", name, got, want)
		}
	}
	for name, unique := range map[string]bool{"sync_ix_tasks_by_title": true, "sync_ix_tasks_by_rank": false} {
		n := queryInt(t, s, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname = $1 AND i.indisunique = $2 AND i.indrelid = 'tasks'::regclass`, name, unique)
		if n != 1 {
			t.Errorf("index %s (unique %t) missing", name, unique)
		}
	}
}

func TestEnsureSchemaRefusals(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	ensure(t, s, testSchema(t, 2))
	if err := s.EnsureSchema(ctx, testSchema(t, 1)); !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("older running schema: %v", err)
	}
	// Same version, other layout.
	other := testSchema(t, 2, schema.String("extra").Null())
	err := s.EnsureSchema(ctx, other)
	var se *store.Error
	if !errors.As(err, &se) || se.Code != store.CodeStoredLayoutMismatch || se.Details["table"] != "tasks" || se.Details["column"] != "extra" {
		t.Errorf("same version, other layout: %v (%+v)", err, se)
	}
	// Same version, a physical column gone.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE tasks DROP COLUMN rank`); err != nil {
		t.Fatal(err)
	}
	err = s.EnsureSchema(ctx, testSchema(t, 2))
	if !errors.As(err, &se) || se.Code != store.CodePhysicalLayoutMismatch || se.Details["column"] != "rank" {
		t.Errorf("missing column: %v", err)
	}
	// A bump that is not append-only.
	c3, err := schema.New(3).Table("tasks", "id", schema.String("id"), schema.String("project_id")).
		Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, c3); store.ErrorCode(err) != store.CodeSchemaMigrationPending {
		t.Errorf("non append-only bump: %v", err)
	}
	if m, _ := s.Marker(ctx); m.SchemaVersion != 2 {
		t.Errorf("marker after a refused bump: %d", m.SchemaVersion)
	}
}

func TestEnsureSchemaAppendOnlyBump(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	s := openIn(t, name, Config{})
	ctx := context.Background()
	c1 := testSchema(t, 1)
	ensure(t, s, c1)
	for _, id := range []string{"a", "b", "c"} {
		apply(t, s, "p", task{id: id, project: "p1", owner: "o", title: ptr("title " + id), rank: ptr[int64](3)}.write(t, c1, 1))
	}
	apply(t, s, "q", task{id: "a", project: "p1", owner: "o"}.write(t, c1, 1))
	// Version 2 adds a nullable column and a table, and drops an index.
	c2, err := schema.New(2).
		Table("tasks", "id", append(c1Columns(c1), schema.Integer("added").Null())...).
		Scope("project:{project_id}").Scope("owner:{owner_id}").
		UniqueIndex("tasks_by_title", "title").Index("tasks_by_added", "added").
		Table("notes", "id", schema.String("id"), schema.String("project_id")).Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	// A second store on the same database migrates concurrently.
	other := openIn(t, name, Config{})
	errs := make(chan error, 1)
	go func() { errs <- other.EnsureSchema(ctx, c2) }()
	ensure(t, s, c2)
	if err := <-errs; err != nil {
		t.Fatalf("concurrent EnsureSchema: %v", err)
	}
	tasks, _ := c2.Table("tasks")
	for _, p := range []string{"p", "q"} {
		r, err := s.Row(ctx, p, "tasks", "a")
		if err != nil {
			t.Fatal(err)
		}
		vals, err := tasks.RowCodec().DecodeRow(r.Payload)
		if err != nil {
			t.Fatalf("migrated payload does not decode: %v", err)
		}
		if !vals[len(vals)-1].Null || vals[0].Str != "a" {
			t.Errorf("migrated row %v", vals)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM tasks WHERE title = 'title b' AND rank = 3 AND added IS NULL`); n != 1 {
		t.Errorf("typed columns after the bump: %d rows", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_class WHERE relname IN ('sync_ix_tasks_by_rank', 'sync_ix_tasks_by_added', 'sync_ix_tasks_by_title')
		AND relnamespace = current_schema()::regnamespace`); n != 2 {
		t.Errorf("indexes after the bump: %d; want by_title and by_added", n)
	}
	w := store.RowWrite{Row: store.Row{Table: "notes", RowID: "n1", ServerVersion: 1,
		Scopes: wire.StoredScopes{{Key: "project_id", Value: "p1"}}}}
	notes, _ := c2.Table("notes")
	w.Payload, _ = notes.RowCodec().AppendRow(nil, []wire.Value{{Str: "n1"}, {Str: "p1"}})
	apply(t, s, "p", w)
	if m, _ := s.Marker(ctx); m.SchemaVersion != 2 || len(m.Layout) != 2 {
		t.Errorf("marker = %+v", m)
	}
	if v := queryInt(t, s, `SELECT writer_version FROM sync_commits ORDER BY commit_seq DESC LIMIT 1`); v != 2 {
		t.Errorf("writer_version after the bump = %d", v)
	}
}

func c1Columns(c *schema.Compiled) []schema.Column {
	t, _ := c.Table("tasks")
	return t.Columns()
}

func TestTypedColumnsProjection(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	tasks, _ := c.Table("tasks")
	vals := []wire.Value{{Str: "t1"}, {Str: "p"}, {Str: "o"}, {Str: "nul\x00here"}, {Int: -5},
		{Str: `{"a":[1,"\u0000"]}`}, {Bool: true}, {Float: 1.5}, {Bytes: []byte{0, 1}}}
	payload, err := tasks.RowCodec().AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	w := store.RowWrite{Row: store.Row{Table: "tasks", RowID: "t1", ServerVersion: 1, Payload: payload,
		Scopes:         wire.StoredScopes{{Key: "owner_id", Value: "o"}, {Key: "project_id", Value: "p"}},
		ColumnVersions: []byte{3, 2}}}
	apply(t, s, "p", w) // typed columns decoded from the payload
	var (
		title  *string
		meta   *string
		rank   int64
		done   bool
		score  float64
		blob   []byte
		scopes string
	)
	err = s.pool.QueryRow(context.Background(), `SELECT title, meta::text, rank, done, score, blob, _sync_scopes::text FROM tasks`).
		Scan(&title, &meta, &rank, &done, &score, &blob, &scopes)
	if err != nil {
		t.Fatal(err)
	}
	if title != nil || meta != nil || rank != -5 || !done || score != 1.5 || string(blob) != "\x00\x01" {
		t.Errorf("typed columns: %v %v %d %t %g %x", title, meta, rank, done, score, blob)
	}
	if scopes != `{"owner_id": "o", "project_id": "p"}` {
		t.Errorf("_sync_scopes = %s", scopes)
	}
	r, err := s.Row(context.Background(), "p", "tasks", "t1")
	if err != nil || string(r.Payload) != string(payload) || string(r.ColumnVersions) != "\x03\x02" {
		t.Errorf("Row = %+v, %v", r, err)
	}
}
