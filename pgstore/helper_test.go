package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// testURL returns the test database URL (pgtest.URL: without one the test
// skips, except under CI=true, where the Postgres tests are required).
func testURL(tb testing.TB) string {
	tb.Helper()
	return pgtest.URL(tb)
}

// newSchema creates a fresh Postgres schema, dropped at cleanup, and
// returns its name.
func newSchema(tb testing.TB) string {
	tb.Helper()
	url := testURL(tb)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	name := "syncgo_test_" + hex.EncodeToString(b[:])
	admin(tb, url, "CREATE SCHEMA "+name)
	tb.Cleanup(func() { admin(tb, url, "DROP SCHEMA "+name+" CASCADE") })
	return name
}

// admin runs one statement on a connection of its own.
func admin(tb testing.TB, url, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// newPool returns a pool whose connections use the schema, closed at
// cleanup.
func newPool(tb testing.TB, schemaName string, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schemaName
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// openStore opens a store on a fresh schema.
func openStore(tb testing.TB) *Store {
	tb.Helper()
	return openIn(tb, newSchema(tb), Config{})
}

// openIn opens a store on the schema with cfg (its Pool set here).
func openIn(tb testing.TB, schemaName string, cfg Config) *Store {
	tb.Helper()
	cfg.Pool = newPool(tb, schemaName, 20)
	s, err := Open(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			tb.Error(err)
		}
	})
	return s
}

// testSchema is the schema of the driver tests: tasks scoped by project
// and owner, with a unique and a plain index and a column of every type.
func testSchema(tb testing.TB, version int32, extra ...schema.Column) *schema.Compiled {
	tb.Helper()
	cols := append([]schema.Column{
		schema.String("id"), schema.String("project_id"), schema.String("owner_id"),
		schema.String("title").Null(), schema.Integer("rank").Null(), schema.JSON("meta").Null(),
		schema.Boolean("done").Null(), schema.Float("score").Null(), schema.Bytes("blob").Null(),
	}, extra...)
	c, err := schema.New(version).
		Table("tasks", "id", cols...).
		Scope("project:{project_id}").Scope("owner:{owner_id}").
		UniqueIndex("tasks_by_title", "title").Index("tasks_by_rank", "rank").
		Compile()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// ensure runs EnsureSchema and fails the test on error.
func ensure(tb testing.TB, s *Store, c *schema.Compiled) {
	tb.Helper()
	if err := s.EnsureSchema(context.Background(), c); err != nil {
		tb.Fatalf("EnsureSchema(v%d): %v", c.Version(), err)
	}
}

// task is a row of the test schema's tasks table.
type task struct {
	id, project, owner string
	title              *string
	rank               *int64
}

// write returns the row write of the task at version.
func (r task) write(tb testing.TB, c *schema.Compiled, version int64) store.RowWrite {
	tb.Helper()
	t, _ := c.Table("tasks")
	vals := make([]wire.Value, len(t.Columns()))
	for i := range vals {
		vals[i] = wire.Value{Null: true}
	}
	vals[0], vals[1], vals[2] = wire.Value{Str: r.id}, wire.Value{Str: r.project}, wire.Value{Str: r.owner}
	if r.title != nil {
		vals[3] = wire.Value{Str: *r.title}
	}
	if r.rank != nil {
		vals[4] = wire.Value{Int: *r.rank}
	}
	payload, err := t.RowCodec().AppendRow(nil, vals)
	if err != nil {
		tb.Fatal(err)
	}
	sc, err := t.StoredScopes(vals)
	if err != nil {
		tb.Fatal(err)
	}
	return store.RowWrite{Row: store.Row{
		Table: "tasks", RowID: r.id, ServerVersion: version,
		Scopes: store.ScopesFromMap(sc.Map()), Payload: payload,
	}}
}

// upsertChange is the change of an upsert of w.
func upsertChange(w store.RowWrite) store.Change {
	return store.Change{Table: w.Table, RowID: w.RowID, Op: wire.OpUpsert, RowVersion: w.ServerVersion, Scopes: w.Scopes, Payload: w.Payload}
}

// commitOf returns a commit of the changes.
func commitOf(id string, changes ...store.Change) store.NewCommit {
	return store.NewCommit{ClientID: "c1", ClientCommitID: id, ActorID: "a1", CreatedAtMs: 1000, Changes: changes}
}

// apply upserts the rows and appends their commit in one Write.
func apply(tb testing.TB, s *Store, partition string, ws ...store.RowWrite) int64 {
	tb.Helper()
	var seq int64
	err := s.Write(context.Background(), partition, func(ctx context.Context, tx store.WriteTx) error {
		var changes []store.Change
		for _, w := range ws {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			changes = append(changes, upsertChange(w))
		}
		var err error
		seq, err = tx.AppendCommit(ctx, commitOf(fmt.Sprintf("commit-%d", time.Now().UnixNano()), changes...))
		return err
	})
	if err != nil {
		tb.Fatalf("apply: %v", err)
	}
	return seq
}

func ptr[T any](v T) *T { return &v }

// scope returns a one-key scope map.
func scope(key string, values ...string) wire.ScopeMap {
	return wire.ScopeMap{{Key: key, Values: values}}
}

// queryInt runs a query that returns one integer, on the store's pool.
func queryInt(tb testing.TB, s *Store, sql string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
	return n
}
