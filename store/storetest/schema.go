package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunSchema tests EnsureSchema and the schema marker.
func RunSchema(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"MarkerAbsent", testMarkerAbsent},
		{"EnsureRecordsMarker", testEnsureRecordsMarker},
		{"EnsureIdempotent", testEnsureIdempotent},
		{"NewerStoredSchema", testNewerStoredSchema},
		{"StoredLayoutMismatch", testStoredLayoutMismatch},
		{"NoSchema", testNoSchema},
		{"UnknownTable", testUnknownTable},
		{"IndexAddedAtSameVersion", testIndexAddedAtSameVersion},
	})
}

func mustCompile(t *testing.T, version int32, tasks []schema.Column, notes bool) *schema.Compiled {
	t.Helper()
	c, err := buildSchema(version, tasks, notes)
	if err != nil {
		t.Fatalf("compile schema: %v", err)
	}
	return c
}

func wantMarker(t *testing.T, s store.Store, version int32, layout schema.Layout) {
	t.Helper()
	m, err := s.Marker(t.Context())
	if err != nil {
		t.Fatalf("Marker: %v", err)
	}
	if m.SchemaVersion != version {
		t.Errorf("Marker().SchemaVersion = %d, want %d", m.SchemaVersion, version)
	}
	if !reflect.DeepEqual(m.Layout, layout) {
		t.Errorf("Marker().Layout =\n  %+v\nwant\n  %+v", m.Layout, layout)
	}
}

func testMarkerAbsent(t *testing.T, open Opener) {
	s := open(t)
	if m, err := s.Marker(t.Context()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Marker() on a fresh database = %+v, %v; want ErrNotFound", m, err)
	}
}

func testEnsureRecordsMarker(t *testing.T, open Opener) {
	e := newEnv(t, open)
	wantMarker(t, e.s, 1, FixtureSchema(t).Layout())
}

func testEnsureIdempotent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	w := Task{ID: "t1", ProjectID: "p1", Title: ptr("kept")}.RowWrite(t, 1)
	e.upsert("p1", w)
	if err := e.s.EnsureSchema(e.ctx, FixtureSchema(t)); err != nil {
		t.Fatalf("second EnsureSchema: %v", err)
	}
	wantMarker(t, e.s, 1, FixtureSchema(t).Layout())
	if got := e.row("p1", TableTasks, "t1"); !sameRow(got, w.Row) {
		t.Errorf("row after second EnsureSchema = %s, want %s", fmtRow(got), fmtRow(w.Row))
	}
}

// testNewerStoredSchema: an older running schema against a database at a
// newer version is refused; the Opener gives a fresh database each time,
// so the same store plays both servers.
func testNewerStoredSchema(t *testing.T, open Opener) {
	s := open(t)
	v2 := mustCompile(t, 2, append(taskColumns(), schema.Boolean("done").Null()), true)
	if err := s.EnsureSchema(t.Context(), v2); err != nil {
		t.Fatalf("EnsureSchema(version 2): %v", err)
	}
	err := s.EnsureSchema(t.Context(), FixtureSchema(t))
	if !errors.Is(err, store.ErrSchemaNewer) {
		t.Errorf("EnsureSchema(version 1) on a version 2 database = %v, want ErrSchemaNewer", err)
	}
	wantMarker(t, s, 2, v2.Layout())
}

func testStoredLayoutMismatch(t *testing.T, open Opener) {
	replace := func(i int, c schema.Column) []schema.Column {
		cols := taskColumns()
		cols[i] = c
		return cols
	}
	tests := []struct {
		name  string
		tasks []schema.Column
		notes bool
	}{
		{"column type changed", replace(3, schema.Float("n").Null()), true},
		{"column made not null", replace(2, schema.String("title")), true},
		{"column renamed", replace(2, schema.String("heading").Null()), true},
		{"column appended", append(taskColumns(), schema.String("extra").Null()), true},
		{"column removed", taskColumns()[:4], true},
		{"table removed", taskColumns(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, open)
			running := mustCompile(t, 1, tt.tasks, tt.notes)
			err := e.s.EnsureSchema(e.ctx, running)
			var se *store.Error
			if !errors.As(err, &se) || se.Code != store.CodeStoredLayoutMismatch {
				t.Errorf("EnsureSchema(same version, other layout) = %v, want *store.Error with code %s", err, store.CodeStoredLayoutMismatch)
			}
			wantMarker(t, e.s, 1, FixtureSchema(t).Layout())
		})
	}
	t.Run("table added", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if err := s.EnsureSchema(t.Context(), mustCompile(t, 1, taskColumns(), false)); err != nil {
			t.Fatalf("EnsureSchema(tasks only): %v", err)
		}
		err := s.EnsureSchema(t.Context(), FixtureSchema(t))
		if store.ErrorCode(err) != store.CodeStoredLayoutMismatch {
			t.Errorf("EnsureSchema(same version, table added) = %v, want code %s", err, store.CodeStoredLayoutMismatch)
		}
	})
}

// testNoSchema: calls that touch rows before EnsureSchema fail with
// ErrNoSchema.
func testNoSchema(t *testing.T, open Opener) {
	s := open(t)
	ctx := t.Context()
	if _, err := s.TouchPartition(ctx, "p1", 1000, epochOf("p1")); err != nil {
		t.Fatalf("TouchPartition before EnsureSchema: %v", err)
	}
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	scopes := wire.ScopeMap{{Key: VarProject, Values: []string{"p1"}}}
	calls := []struct {
		name string
		call func() error
	}{
		{"UpsertRow", func() error {
			return s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, w) })
		}},
		{"Row", func() error { _, err := s.Row(ctx, "p1", TableTasks, "t1"); return err }},
		{"ScanRows", func() error {
			_, err := s.ScanRows(ctx, "p1", store.RowScanQuery{Table: TableTasks, Scopes: scopes, Limit: 10})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, store.ErrNoSchema) {
			t.Errorf("%s before EnsureSchema = %v, want ErrNoSchema", c.name, err)
		}
	}
}

func testUnknownTable(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p1")
	const table = "missing"
	w := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	w.Table = table
	scopes := wire.ScopeMap{{Key: VarProject, Values: []string{"p1"}}}
	inTx := func(fn func(ctx context.Context, tx store.WriteTx) error) func() error {
		return func() error { return e.s.Write(e.ctx, "p1", fn) }
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Row", func() error { _, err := e.s.Row(e.ctx, "p1", table, "t1"); return err }},
		{"ScanRows", func() error {
			_, err := e.s.ScanRows(e.ctx, "p1", store.RowScanQuery{Table: table, Scopes: scopes, Limit: 10})
			return err
		}},
		{"WriteTx.UpsertRow", inTx(func(ctx context.Context, tx store.WriteTx) error { return tx.UpsertRow(ctx, w) })},
		{"WriteTx.Row", inTx(func(ctx context.Context, tx store.WriteTx) error { _, err := tx.Row(ctx, table, "t1"); return err })},
		{"WriteTx.DeleteRow", inTx(func(ctx context.Context, tx store.WriteTx) error { return tx.DeleteRow(ctx, table, "t1") })},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, store.ErrUnknownTable) {
			t.Errorf("%s of a table outside the schema = %v, want ErrUnknownTable", c.name, err)
		}
	}
}

// testIndexAddedAtSameVersion: a start whose schema declares an index the
// database lacks at the same version is refused with upgrade_required, and
// the message says that a changed index declaration needs a new version
// (not only that an older server line wrote the database); the same
// declaration at a new version is migrated and builds the index.
func testIndexAddedAtSameVersion(t *testing.T, open Opener) {
	s := open(t)
	if _, ok := s.(store.Upgrader); !ok {
		t.Skip("the store has no physical layout to upgrade")
	}
	ctx := t.Context()
	build := func(version int32, index bool) *schema.Compiled {
		tb := schema.New(version).Table(TableTasks, "id", taskColumns()...).Scope("project:{project_id}")
		if index {
			tb = tb.Index("by_title", "title")
		}
		c, err := tb.Compile()
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		return c
	}
	if err := s.EnsureSchema(ctx, build(1, false)); err != nil {
		t.Fatalf("EnsureSchema v1: %v", err)
	}
	err := s.EnsureSchema(ctx, build(1, true))
	var se *store.Error
	if !errors.As(err, &se) || se.Code != store.CodePhysicalLayoutMismatch || se.Details["reason"] != "upgrade_required" ||
		!strings.Contains(se.Message, "needs a new schema version") || !strings.Contains(se.Message, "sync_ix_by_title") {
		t.Fatalf("EnsureSchema v1 with an index added = %v; want %s (upgrade_required) saying the declaration needs a new schema version",
			err, store.CodePhysicalLayoutMismatch)
	}
	if err := s.EnsureSchema(ctx, build(2, true)); err != nil {
		t.Fatalf("EnsureSchema v2 with the index: %v", err)
	}
}
