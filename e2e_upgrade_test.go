package syncgo_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/cli"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
)

// A database of the reference 0.15 to 0.20 line (app tables without
// _sync_column_versions) is refused at start with a pointer to `syncgo
// migrate`; after the command, a client that synced before keeps syncing
// incrementally from its cursor (no re-bootstrap), over real HTTP, on both
// drivers.
func TestE2EUpgradeOlderLineKeepsClientsIncremental(t *testing.T) {
	schemaFile := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(schemaFile, []byte(upgradeSchemaJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	ir, err := schema.ParseJSON([]byte(upgradeSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Compile(ir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range barrierDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.database(t)
			// One address for the whole test, whichever server runs.
			var current atomic.Pointer[http.Handler]
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if h := current.Load(); h != nil {
					(*h).ServeHTTP(w, r)
					return
				}
				http.Error(w, "no server", http.StatusServiceUnavailable)
			}))
			defer hs.Close()
			url := hs.URL
			start := func() (func(), error) {
				t.Helper()
				st, err := d.open(t, db)
				if err != nil {
					return nil, err
				}
				srv, err := syncgo.New(syncgo.Config{
					Store: st, Schema: sc, RetentionInterval: -1,
					Authenticate: func(r *http.Request) (syncgo.Auth, error) {
						return syncgo.Auth{ActorID: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), Partition: "p"}, nil
					},
					ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
						return map[string][]string{"project_id": {"*"}}, nil
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.Start(context.Background()); err != nil {
					st.Close()
					return nil, err
				}
				h := srv.Handler()
				current.Store(&h)
				return func() { current.Store(nil); srv.Stop(context.Background()); st.Close() }, nil
			}

			stop, err := start()
			if err != nil {
				t.Fatal(err)
			}
			w, err := sspclient.New(url, "writer", sc, sspclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				mustUpsert(t, w, taskRow(fmt.Sprintf("a%d", i), "p1", "before"))
			}
			syncQuiet(t, w)
			c, err := sspclient.New(url, "alice", sc, sspclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			mustSubscribe(t, c, "s", "p1")
			syncQuiet(t, c)
			stop()

			// The database becomes one of the older line.
			dropColumnVersions(t, d.name, db, sc)
			if _, err := start(); err == nil || !strings.Contains(err.Error(), "syncgo migrate") {
				t.Fatalf("start on an older-line database = %v, want a refusal that names syncgo migrate", err)
			}
			var out, errOut bytes.Buffer
			if code := cli.Run(context.Background(), []string{"migrate", "-db", db, "-schema", schemaFile}, nil, &out, &errOut); code != 0 {
				t.Fatalf("syncgo migrate: exit %d: %s%s", code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), "_sync_column_versions") {
				t.Fatalf("syncgo migrate printed %q, want the added column", out.String())
			}

			stop, err = start()
			if err != nil {
				t.Fatalf("start after migrate: %v", err)
			}
			defer stop()
			mustUpsert(t, w, taskRow("b1", "p1", "after"))
			mustUpsert(t, w, taskRow("a1", "p1", "edited after"))
			syncQuiet(t, w)
			commits := 0
			for _, res := range syncQuiet(t, c) {
				for _, s := range res.Sections {
					if s.Bootstrap || s.Segments > 0 {
						t.Fatalf("section %s after the upgrade: bootstrap %v, %d segments; want incremental commits only", s.ID, s.Bootstrap, s.Segments)
					}
					commits += s.Commits
				}
			}
			if commits != 2 {
				t.Fatalf("the client pulled %d commits after the upgrade, want the 2 new ones", commits)
			}
			st, err := d.open(t, db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.EnsureSchema(context.Background(), sc); err != nil {
				t.Fatal(err)
			}
			rows, err := st.ListRows(context.Background(), "p", "tasks", nil, 100)
			if err != nil {
				t.Fatal(err)
			}
			tbl, _ := sc.Table("tasks")
			server := map[string]string{}
			for _, r := range rows {
				vals, err := tbl.RowCodec().DecodeRow(r.Payload)
				if err != nil {
					t.Fatal(err)
				}
				server[r.RowID] = renderRow(t, tbl, r.ServerVersion, vals)
			}
			if len(server) != 6 {
				t.Fatalf("server has %d rows, want 6", len(server))
			}
			sameRows(t, "client vs server after the upgrade", clientRows(t, c, "tasks"), server)
		})
	}
}

// dropColumnVersions removes _sync_column_versions from every app table,
// as the 0.15 to 0.20 line lays them out.
func dropColumnVersions(t *testing.T, driver, db string, sc *schema.Compiled) {
	t.Helper()
	for _, tbl := range sc.Tables() {
		stmt := `ALTER TABLE "` + tbl.Name() + `" DROP COLUMN _sync_column_versions`
		if driver == "postgres" {
			pgtest.Exec(t, db, stmt)
			continue
		}
		conn, err := sqlite.OpenConn(db)
		if err != nil {
			t.Fatal(err)
		}
		err = sqlitex.ExecuteTransient(conn, stmt, nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// upgradeSchemaJSON is the schema of the upgrade test, as the file an
// operator passes to syncgo migrate.
const upgradeSchemaJSON = `{
  "version": 1,
  "tables": [
    {
      "name": "tasks",
      "primaryKey": "id",
      "columns": [
        { "name": "id", "type": "string", "nullable": false },
        { "name": "project_id", "type": "string", "nullable": false },
        { "name": "title", "type": "string", "nullable": false },
        { "name": "done", "type": "boolean", "nullable": false },
        { "name": "rank", "type": "integer", "nullable": true },
        { "name": "notes", "type": "json", "nullable": true }
      ],
      "scopes": [ "project:{project_id}" ]
    }
  ]
}`
