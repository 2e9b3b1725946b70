package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/pgtest"
)

// foreignCommands are the operator commands that work on an existing
// syncgo database; run on anything else they must refuse and write
// nothing.
var foreignCommands = [][]string{
	{"migrate"},
	{"migrate", "-dry-run"},
	{"checkpoint", "declare", "-name", "proj", "-version", "2", "-yes"},
	{"backfill", "-name", "proj", "-sources", "tasks", "-no-projection"},
	{"epoch", "rotate", "-yes", "-force"},
	{"reactions", "backlog"},
	{"reactions", "list"},
	{"reactions", "retry", "-partition", "default", "-key", "k"},
	{"reactions", "drop", "-partition", "default", "-key", "k"},
	{"export", "-partition", "default", "-table", "tasks"},
}

// An operator command pointed at the wrong database (a typo'd SQLite path,
// an empty file, another application's SQLite file or Postgres schema)
// refuses with a message that says so and leaves it as it was: before,
// migrate, checkpoint declare, backfill, epoch rotate and reactions
// retry/drop created a new syncgo database there (or installed the sync_*
// tables into the other application's database) and several of them
// reported success ("nothing to upgrade", "checkpoint proj (version 2) is
// declared", "no partitions: nothing to rotate").
func TestOperatorCommandsRefuseForeignDatabase(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		sqliteTables := func(t *testing.T, path string) []string {
			t.Helper()
			conn, err := sqlite.OpenConn(path, sqlite.OpenReadOnly)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var names []string
			err = sqlitex.ExecuteTransient(conn, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", &sqlitex.ExecOptions{
				ResultFunc: func(st *sqlite.Stmt) error { names = append(names, st.ColumnText(0)); return nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			return names
		}
		for _, args := range foreignCommands {
			name := strings.Join(args, " ")
			t.Run(name, func(t *testing.T) {
				missing := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+"-typo.db")
				code, out, errOut := run(t, "", append(args, "-db", missing)...)
				if _, err := os.Stat(missing); code == 0 || err == nil {
					t.Fatalf("%s on a missing file: exit %d, file created: %v\nstdout: %s\nstderr: %s", name, code, err == nil, out, errOut)
				}

				empty := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+"-empty.db")
				if err := os.WriteFile(empty, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				code, out, errOut = run(t, "", append(args, "-db", empty)...)
				if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 || code == 0 || !strings.Contains(errOut, "not a syncgo database") {
					t.Fatalf("%s on an empty file: exit %d, size %v\nstdout: %s\nstderr: %s", name, code, fi.Size(), out, errOut)
				}

				other := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+"-other.db")
				conn, err := sqlite.OpenConn(other, sqlite.OpenReadWrite|sqlite.OpenCreate)
				if err != nil {
					t.Fatal(err)
				}
				if err := sqlitex.ExecuteScript(conn, "CREATE TABLE people(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO people VALUES (1, 'a');", nil); err != nil {
					t.Fatal(err)
				}
				conn.Close()
				code, out, errOut = run(t, "", append(args, "-db", other)...)
				if tables := sqliteTables(t, other); code == 0 || !slices.Equal(tables, []string{"people"}) || !strings.Contains(errOut, "not a syncgo database") {
					t.Fatalf("%s on another application's file: exit %d, tables %v\nstdout: %s\nstderr: %s", name, code, tables, out, errOut)
				}
			})
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Schema(t, "syncgo_foreign", false)
		pgtest.Exec(t, db, "CREATE TABLE people(id bigint PRIMARY KEY, name text)")
		pgTables := func(t *testing.T) []string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			rows, err := conn.Query(ctx, "SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S') ORDER BY 1")
			if err != nil {
				t.Fatal(err)
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return names
		}
		for _, args := range foreignCommands {
			name := strings.Join(args, " ")
			code, out, errOut := run(t, "", append(args, "-db", db)...)
			if tables := pgTables(t); code == 0 || !slices.Equal(tables, []string{"people"}) || !strings.Contains(errOut, "not a syncgo database") {
				t.Fatalf("%s on another application's schema: exit %d, tables %v\nstdout: %s\nstderr: %s", name, code, tables, out, errOut)
			}
		}
	})
}

// migrate -dry-run says what migrate would do: on a database whose
// stored schema is newer than the running one, migrate refuses, so the
// dry run must not answer "nothing to upgrade" (it did).
func TestMigrateDryRunReportsRefusal(t *testing.T) {
	forEachOperatorDriver(t, func(t *testing.T, d opDB) {
		ctx := context.Background()
		v2 := strings.Replace(string(demoSchema), `"version": 1`, `"version": 2`, 1)
		if v2 == string(demoSchema) {
			t.Fatal("the demo schema is not at version 1")
		}
		schemaFile := filepath.Join(t.TempDir(), "v2.json")
		if err := os.WriteFile(schemaFile, []byte(v2), 0o600); err != nil {
			t.Fatal(err)
		}
		sc, err := loadSchema(schemaFile)
		if err != nil {
			t.Fatal(err)
		}
		st, err := openStore(ctx, d.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureSchema(ctx, sc); err != nil {
			t.Fatal(err)
		}
		st.Close()
		code, out, errOut := run(t, "", "migrate", "-db", d.db)
		if code == 0 || !strings.Contains(errOut, "newer") {
			t.Fatalf("migrate of a newer database: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = run(t, "", "migrate", "-dry-run", "-db", d.readOnlyDB)
		if code == 0 || !strings.Contains(errOut, "newer") || strings.Contains(out, "nothing to upgrade") {
			t.Fatalf("migrate -dry-run of a newer database: exit %d\n%s%s", code, out, errOut)
		}

		// migrate does not consult the checkpoints: with one incomplete at
		// the stored version, both answer that there is nothing to do.
		if code, _, errOut := run(t, "", "checkpoint", "declare", "-db", d.db, "-name", "proj", "-version", "2", "-yes"); code != 0 {
			t.Fatalf("declare: exit %d: %s", code, errOut)
		}
		for _, args := range [][]string{{"migrate", "-dry-run", "-db", d.readOnlyDB}, {"migrate", "-db", d.db}} {
			code, out, errOut = run(t, "", append(args, "-schema", schemaFile)...)
			if code != 0 || !strings.Contains(out, "nothing to upgrade") {
				t.Fatalf("%v beside an incomplete checkpoint: exit %d\n%s%s", args[:2], code, out, errOut)
			}
		}
	})
}

// migrate on an up-to-date database neither waits for nor holds the
// running writers: it plans first, reading only, and takes the migration
// lock (Postgres: LOCK TABLE sync_partitions IN EXCLUSIVE MODE; SQLite:
// the write lock) only when there is something to add. Before, it took
// the lock every time: behind a writer's open transaction it waited
// (SQLite: the 5 s busy timeout, then "database is locked"), and every
// push of the running servers queued behind it meanwhile.
func TestMigrateUpToDateTakesNoLock(t *testing.T) {
	forEachOperatorDriver(t, func(t *testing.T, d opDB) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := openStore(ctx, d.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := loadSchema("")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureSchema(ctx, sc); err != nil {
			t.Fatal(err)
		}
		st.Close()
		// A writer's transaction stays open while migrate runs.
		if d.fingerprint != nil {
			conn, err := sqlite.OpenConn(d.db, sqlite.OpenReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := sqlitex.ExecuteTransient(conn, "BEGIN IMMEDIATE", nil); err != nil {
				t.Fatal(err)
			}
			defer sqlitex.ExecuteTransient(conn, "ROLLBACK", nil)
		} else {
			conn, err := pgx.Connect(ctx, d.db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "LOCK TABLE sync_partitions IN ROW EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		code, out, errOut := run(t, "", "migrate", "-db", d.db)
		if took := time.Since(start); code != 0 || !strings.Contains(out, "nothing to upgrade") || took > 2*time.Second {
			t.Fatalf("migrate of an up-to-date database beside an open write transaction: exit %d after %v\n%s%s", code, took, out, errOut)
		}
	})
}
