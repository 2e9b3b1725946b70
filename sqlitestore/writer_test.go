package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

func openWriterTest(t *testing.T) (testStore, context.Context) {
	t.Helper()
	s := openPath(t, filepath.Join(t.TempDir(), "sync.db"))
	ctx := context.Background()
	if err := s.EnsureSchema(ctx, storetest.FixtureSchema(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TouchPartition(ctx, "p1", 1000, "epoch-p1"); err != nil {
		t.Fatal(err)
	}
	return s, ctx
}

// TestUpsertHealsScopeIndex: an upsert replaces whatever the scope index
// holds for the row, also an entry left behind for a row that is absent
// (an operator's SQL delete of the row alone): a single-key bootstrap
// scan trusts the index without re-checking the row's scopes, so the
// re-inserted row must not stay listed under its old scope.
func TestUpsertHealsScopeIndex(t *testing.T) {
	s, ctx := openWriterTest(t)
	if err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		return tx.UpsertRow(ctx, storetest.Task{ID: "x", ProjectID: "old"}.RowWrite(t, 1))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.ExecRaw(ctx, `DELETE FROM "tasks" WHERE _sync_row_id = 'x'`); err != nil {
		t.Fatal(err)
	}
	err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.Row(ctx, storetest.TableTasks, "x"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Row = %v, want ErrNotFound", err)
		}
		return tx.UpsertRow(ctx, storetest.Task{ID: "x", ProjectID: "new"}.RowWrite(t, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = s.read(ctx, func(c *conn) error {
		rows, err := c.query("SELECT var || '=' || value FROM sync_row_scopes WHERE partition='p1' AND row_id='x' ORDER BY 1")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e string
			if err := rows.Scan(&e); err != nil {
				return err
			}
			got = append(got, e)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "project_id=new" {
		t.Errorf("scope entries of the re-inserted row = %v, want [project_id=new]", got)
	}
}

// TestCandidateUsesRequestSavepoint: a write's first candidate after
// reads only (a push's journal lookup) runs in the write's own savepoint,
// with no SAVEPOINT of its own; one after a write opens its own.
func TestCandidateUsesRequestSavepoint(t *testing.T) {
	s, ctx := openWriterTest(t)
	own := func() bool {
		_, ok := s.w.c.stmts["SAVEPOINT c1"]
		return ok
	}
	x := storetest.Task{ID: "x", ProjectID: "p1"}.RowWrite(t, 1)
	if err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if _, err := tx.PushResult(ctx, "c", "cc-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PushResult = %v, want ErrNotFound", err)
		}
		return tx.Candidate(ctx, func(ctx context.Context) error { return tx.UpsertRow(ctx, x) })
	}); err != nil {
		t.Fatal(err)
	}
	if own() {
		t.Errorf("the first candidate after reads opened a savepoint of its own")
	}
	if err := s.Write(ctx, "p1", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, x); err != nil {
			return err
		}
		return tx.Candidate(ctx, func(ctx context.Context) error { return tx.UpsertRow(ctx, x) })
	}); err != nil {
		t.Fatal(err)
	}
	if !own() {
		t.Errorf("a candidate after a write did not open a savepoint of its own")
	}
}
