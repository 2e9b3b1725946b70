package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/pgtest"
)

// opDB is a database of one storage driver for the operator commands:
// db is the -db value, readOnlyDB one whose sessions cannot write.
type opDB struct {
	db, readOnlyDB string
	// fingerprint changes when anything in the database changed (SQLite:
	// the files' bytes); nil when the driver relies on readOnlyDB.
	fingerprint func() string
	// exec runs a statement on the database.
	exec func(t *testing.T, sql string)
}

func forEachOperatorDriver(t *testing.T, fn func(t *testing.T, d opDB)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "op.db")
		fn(t, opDB{db: path, readOnlyDB: path, exec: func(t *testing.T, stmt string) {
			t.Helper()
			conn, err := sqlite.OpenConn(path, sqlite.OpenReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := sqlitex.ExecuteTransient(conn, stmt, nil); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}, fingerprint: func() string {
			h := sha256.New()
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				// The -shm file is SQLite's shared-memory index, which
				// any reader of a WAL database maps; an empty -wal holds
				// nothing.
				if strings.HasSuffix(e.Name(), "-shm") || len(b) == 0 {
					continue
				}
				h.Write([]byte(e.Name()))
				h.Write(b)
			}
			return hex.EncodeToString(h.Sum(nil))
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Schema(t, "syncgo_cli", false)
		u, err := url.Parse(db)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("default_transaction_read_only", "on")
		u.RawQuery = q.Encode()
		fn(t, opDB{db: db, readOnlyDB: u.String(), exec: func(t *testing.T, stmt string) { pgtest.Exec(t, db, stmt) }})
	})
}

// run runs the command line and returns the exit code and outputs.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func wantOutput(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

// The operator commands on both drivers: schema reads only and reports
// what a start, a request and a push would get; checkpoint declare says
// which fence it set and asks before fencing writers off; backfill
// refuses to activate without a projection unless told none is needed;
// migrate on an up-to-date database does nothing.
func TestOperatorCommands(t *testing.T) {
	forEachOperatorDriver(t, func(t *testing.T, d opDB) {
		// A missing SQLite file is not created by a read-only command.
		if d.fingerprint != nil {
			code, _, _ := run(t, "", "schema", "-db", d.db)
			if _, err := os.Stat(d.db); code == 0 || err == nil {
				t.Fatalf("schema on a missing file: exit %d, file created: %v", code, err == nil)
			}
		}
		// A database at the running layout, as serve leaves it.
		ctx := context.Background()
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

		before := ""
		if d.fingerprint != nil {
			before = d.fingerprint()
		}
		code, out, errOut := run(t, "", "schema", "-db", d.readOnlyDB)
		if code != 0 {
			t.Fatalf("schema: exit %d: %s", code, errOut)
		}
		wantOutput(t, "schema", out, "stored schema: version 1", "start: ready (the database holds the running layout; nothing to write)", `requests to partition "default": ready`,
			`pushes to partition "default": accepted (writer fence 0)`)
		if d.fingerprint != nil && d.fingerprint() != before {
			t.Fatal("schema changed the database files")
		}

		// Declaring asks before raising the fence; "no" declares nothing.
		code, _, errOut = run(t, "n\n", "checkpoint", "declare", "-db", d.db, "-name", "proj", "-version", "2")
		if code == 0 || !strings.Contains(errOut, "from 0 to 2") {
			t.Fatalf("declare answered no: exit %d: %s", code, errOut)
		}
		_, out, _ = run(t, "", "schema", "-db", d.readOnlyDB)
		wantOutput(t, "schema after a refused declaration", out, `checkpoints of partition "default": 0`)
		code, out, errOut = run(t, "y\n", "checkpoint", "declare", "-db", d.db, "-name", "proj", "-version", "2")
		if code != 0 {
			t.Fatalf("declare: exit %d: %s", code, errOut)
		}
		wantOutput(t, "declare", out, `checkpoint proj (version 2) is declared; writer fence of partition "default": 2 (was 0)`)
		_, out, _ = run(t, "", "schema", "-db", d.readOnlyDB)
		wantOutput(t, "schema after the declaration", out, `requests to partition "default": ready`,
			"sync.schema_not_ready (the writer fence requires version 2)", "proj  version 2  declared")
		// -yes declares without asking; the fence stays.
		code, out, _ = run(t, "", "checkpoint", "declare", "-db", d.db, "-name", "other", "-version", "2", "-yes")
		if code != 0 {
			t.Fatalf("declare -yes: exit %d", code)
		}
		wantOutput(t, "declare -yes", out, "fence of partition \"default\": 2 (was 2)")

		// The command line has no projection: it refuses to activate
		// unless told that none is needed.
		code, _, errOut = run(t, "", "backfill", "-db", d.db, "-name", "proj", "-sources", "tasks")
		if code == 0 || !strings.Contains(errOut, "-no-projection") {
			t.Fatalf("backfill without a projection: exit %d: %s", code, errOut)
		}
		_, out, _ = run(t, "", "schema", "-db", d.readOnlyDB)
		wantOutput(t, "schema after a refused backfill", out, "proj  version 2  declared")
		// A checkpoint that was never declared: the hint is to declare
		// it, not to run the backfill again.
		code, _, errOut = run(t, "", "backfill", "-db", d.db, "-name", "nope", "-sources", "tasks", "-no-projection")
		if code == 0 || !strings.Contains(errOut, "checkpoint_not_declared") || !strings.Contains(errOut, "declare it first") || strings.Contains(errOut, "run the command again") {
			t.Fatalf("backfill of an undeclared checkpoint: exit %d: %s", code, errOut)
		}
		code, out, errOut = run(t, "", "backfill", "-db", d.db, "-name", "proj", "-sources", "tasks", "-no-projection")
		if code != 0 {
			t.Fatalf("backfill -no-projection: exit %d: %s", code, errOut)
		}
		wantOutput(t, "backfill", out, "checkpoint proj activated")

		code, out, errOut = run(t, "", "migrate", "-db", d.db)
		if code != 0 {
			t.Fatalf("migrate: exit %d: %s", code, errOut)
		}
		wantOutput(t, "migrate", out, "nothing to upgrade")

		// A core table this build adds (a database of an earlier build):
		// the report says a start creates it.
		d.exec(t, "DROP TABLE sync_lease_revocations")
		_, out, _ = run(t, "", "schema", "-db", d.readOnlyDB)
		wantOutput(t, "schema without a core table", out, "start: ready once it adds", "create table sync_lease_revocations")
	})
}

// syncgo version names the binary and the Go version it was built with.
func TestVersionCommand(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "syncgo ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
}
