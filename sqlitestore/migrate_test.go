package sqlitestore

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// items(id, p, title?) scoped by p; v2 appends rank? and a unique index on
// (p, title), and adds the table extra.
func itemsSchema(t *testing.T, version int32, materialize, grown bool) *schema.Compiled {
	t.Helper()
	cols := []schema.Column{schema.String("id"), schema.String("p"), schema.String("title").Null()}
	if grown {
		cols = append(cols, schema.Integer("rank").Null())
	}
	b := schema.New(version).Table("items", "id", cols...).Scope("p:{p}").Materialize(materialize)
	if grown {
		b = b.UniqueIndex("by_title", "p", "title").
			Table("extra", "id", schema.String("id"), schema.String("p")).Scope("p:{p}")
	}
	c, err := b.Compile()
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return c
}

func queryInt(t *testing.T, s *Store, query string, args ...any) int64 {
	t.Helper()
	var n int64
	err := s.read(t.Context(), func(c *conn) error { return c.queryRow(query, args...).Scan(&n) })
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestMigrateRewritesEveryPage: a bump rewrites rows and logged changes
// beyond one page, fills the typed columns of a table that becomes
// materialized, and creates the new table and index.
func TestMigrateRewritesEveryPage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	v1 := itemsSchema(t, 1, false, false)
	if err := s.EnsureSchema(ctx, v1); err != nil {
		t.Fatal(err)
	}
	const n = 2*rewriteBatch + 7
	var writes []store.RowWrite
	for i := range n {
		p := fmt.Sprintf("p%d", i%2)
		w := storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: fmt.Sprintf("i%04d", i)}, {Str: p}, {Str: fmt.Sprintf("t%d", i)}}, 1)
		storetest.ApplyUpsert(t, s, p, w)
		writes = append(writes, w)
	}
	v2 := itemsSchema(t, 2, true, true)
	if err := s.EnsureSchema(ctx, v2); err != nil {
		t.Fatalf("bump: %v", err)
	}
	items, _ := v2.Table("items")
	for i, w := range writes {
		p := fmt.Sprintf("p%d", i%2)
		got, err := s.Row(ctx, p, "items", w.RowID)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := items.RowCodec().DecodeRow(got.Payload)
		if err != nil || len(vals) != 4 || vals[2].Str != fmt.Sprintf("t%d", i) || !vals[3].Null {
			t.Fatalf("row %s after the bump = %v, %v", w.RowID, vals, err)
		}
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM items WHERE title IS NOT NULL`); got != n {
		t.Errorf("typed titles filled = %d, want %d", got, n)
	}
	for _, p := range []string{"p0", "p1"} {
		commits, err := s.ReadCommits(ctx, p, 0, n, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range commits {
			if _, err := items.RowCodec().DecodeRow(c.Changes[0].Payload); err != nil {
				t.Fatalf("change of commit %d/%d after the bump: %v", c.Seq, len(commits), err)
			}
		}
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM sqlite_master WHERE type='index' AND name=?`, schema.PhysicalIndexName("by_title")); got != 1 {
		t.Errorf("declared index created %d times", got)
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM pragma_table_info('extra')`); got == 0 {
		t.Error("new table extra not created")
	}
	// A reopened store at the new version passes the same-version checks.
	if err := s.Reopen(t).EnsureSchema(ctx, v2); err != nil {
		t.Errorf("same-version open after the bump: %v", err)
	}
}

// TestMigrateRefusalWritesNothing: a bump the layout rule refuses leaves
// no DDL behind.
func TestMigrateRefusalWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(ctx, itemsSchema(t, 1, true, false)); err != nil {
		t.Fatal(err)
	}
	// Version 2 changes the type of title and adds the table extra.
	bad, err := schema.New(2).Table("items", "id", schema.String("id"), schema.String("p"), schema.Integer("title").Null()).Scope("p:{p}").
		Table("extra", "id", schema.String("id"), schema.String("p")).Scope("p:{p}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	err = s.EnsureSchema(ctx, bad)
	if code := store.ErrorCode(err); code != store.CodeSchemaMigrationPending {
		t.Fatalf("bump changing a column type = %v, want code %s", err, store.CodeSchemaMigrationPending)
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM sqlite_master WHERE name='extra'`); got != 0 {
		t.Error("a refused bump created a table")
	}
	if got := queryInt(t, s.Store, `SELECT schema_version FROM sync_schema_meta`); got != 1 {
		t.Errorf("marker after a refused bump = %d", got)
	}
}

// TestMigrateDropsStaleIndex: an owned index the new schema no longer
// declares is dropped; an operator's index survives.
func TestMigrateDropsStaleIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	if err := s.EnsureSchema(ctx, itemsSchema(t, 1, true, true)); err != nil {
		t.Fatal(err)
	}
	if err := s.ExecRaw(ctx, `CREATE INDEX operator_ix ON items(title)`); err != nil {
		t.Fatal(err)
	}
	v2, err := schema.New(2).Table("items", "id", schema.String("id"), schema.String("p"), schema.String("title").Null(), schema.Integer("rank").Null()).
		Scope("p:{p}").Index("by_rank", "p", "rank").
		Table("extra", "id", schema.String("id"), schema.String("p")).Scope("p:{p}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, v2); err != nil {
		t.Fatalf("bump: %v", err)
	}
	var names []string
	err = s.read(ctx, func(c *conn) error {
		rows, err := c.query(`SELECT name FROM pragma_index_list('items') WHERE origin='c' ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			names = append(names, name)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"operator_ix", schema.PhysicalIndexName("by_rank")}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("indexes after the bump = %v, want %v", names, want)
	}
}

// TestMigrateMaterializes: a bump that materializes a table with the same
// layout fills its typed columns from the payloads.
func TestMigrateMaterializes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	v1 := itemsSchema(t, 1, false, false)
	if err := s.EnsureSchema(ctx, v1); err != nil {
		t.Fatal(err)
	}
	storetest.ApplyUpsert(t, s, "p", storetest.NewRowWrite(t, v1, "items", []wire.Value{{Str: "i1"}, {Str: "p"}, {Str: "kept"}}, 1))
	if err := s.EnsureSchema(ctx, itemsSchema(t, 2, true, false)); err != nil {
		t.Fatalf("bump: %v", err)
	}
	if got := queryInt(t, s.Store, `SELECT count(*) FROM items WHERE id='i1' AND p='p' AND title='kept'`); got != 1 {
		t.Errorf("typed columns of a materialized table not filled")
	}
}
