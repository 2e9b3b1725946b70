package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
)

func TestOpenIsIdempotent(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	ctx := context.Background()
	// Concurrent opens of one schema serialize on the migration lock.
	errs := make(chan error, 4)
	pool := newPool(t, name, 8)
	for range 4 {
		go func() {
			_, err := Open(ctx, Config{Pool: pool})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	s := openIn(t, name, Config{})
	for _, table := range []string{"sync_partitions", "sync_partition_registry", "sync_row_scopes", "sync_commits",
		"sync_changes", "sync_change_scopes", "sync_push_results", "sync_clients", "sync_tombstones",
		"sync_schema_meta", "sync_backfill_checkpoints", "sync_writer_fence"} {
		if n := queryInt(t, s, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, name, table); n != 1 {
			t.Errorf("table %s: %d in schema %s", table, n, name)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_trigger WHERE tgname = 'sync_commits_writer_fence'
		AND tgrelid = 'sync_commits'::regclass`); n != 1 {
		t.Errorf("fence triggers on sync_commits: %d", n)
	}
}

func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	a, b := openStore(t), openStore(t)
	c := testSchema(t, 1)
	ensure(t, a, c)
	ensure(t, b, c)
	w := task{id: "t1", project: "p1", owner: "o1"}.write(t, c, 1)
	apply(t, a, "part", w)
	if _, err := a.Row(context.Background(), "part", "tasks", "t1"); err != nil {
		t.Errorf("a.Row: %v", err)
	}
	if _, err := b.Row(context.Background(), "part", "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.Row = %v; want ErrNotFound (schemas share rows)", err)
	}
	if p, err := b.Partition(context.Background(), "part"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.Partition = %+v, %v; want ErrNotFound", p, err)
	}
}

func TestOpenURLAndClose(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	url := testURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s, err := Open(context.Background(), Config{URL: url + sep + "search_path=" + name, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, s, testSchema(t, 1))
	if n := queryInt(t, s, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'tasks'`, name); n != 1 {
		t.Errorf("tasks in %s: %d", name, n)
	}
	if got := s.Pool().Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Marker(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Marker after Close = %v", err)
	}
	if err := s.Write(context.Background(), "p", func(context.Context, store.WriteTx) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
	if _, err := Open(context.Background(), Config{}); err == nil {
		t.Error("Open without URL or Pool succeeded")
	}
}

func TestCallsBeforeEnsureSchema(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.Row(ctx, "p", "tasks", "x"); !errors.Is(err, store.ErrNoSchema) {
		t.Errorf("Row = %v", err)
	}
	if _, err := s.Marker(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Marker = %v", err)
	}
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, commitOf("x"))
		return err
	})
	if !errors.Is(err, store.ErrNoSchema) {
		t.Errorf("AppendCommit = %v", err)
	}
	ensure(t, s, testSchema(t, 1))
	if _, err := s.Row(ctx, "p", "nope", "x"); !errors.Is(err, store.ErrUnknownTable) {
		t.Errorf("Row of unknown table = %v", err)
	}
}
