package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// `syncgo serve` with a query rule in scopes: the lists an actor may use
// come from a list_members table that an admin writes, on SQLite and on
// Postgres.

const membersSchema = `{
  "version": 1,
  "tables": [
    {"name": "todos", "primaryKey": "id", "scopes": ["list:{list_id}"], "columns": [
      {"name": "id", "type": "string", "nullable": false},
      {"name": "list_id", "type": "string", "nullable": false},
      {"name": "title", "type": "string", "nullable": false},
      {"name": "done", "type": "boolean", "nullable": false}]},
    {"name": "list_members", "primaryKey": "id", "scopes": ["user:{user_id}"], "columns": [
      {"name": "id", "type": "string", "nullable": false},
      {"name": "list_id", "type": "string", "nullable": false},
      {"name": "user_id", "type": "string", "nullable": false}]}
  ]
}`

const membersScopes = `scopes:
  list_id:
    - query: "SELECT list_id FROM list_members WHERE user_id = :actor"
    - value: "*"
      when: {claim: role, equals: admin}
  user_id:
    - claim: sub
    - value: "*"
      when: {claim: role, equals: admin}
`

func TestBinaryGrantQuery(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	schemaPath := filepath.Join(dir, "schema.json")
	must(t, os.WriteFile(schemaPath, []byte(membersSchema), 0o600))
	sc, err := schema.ParseJSON([]byte(membersSchema))
	must(t, err)
	csc, err := schema.Compile(sc)
	must(t, err)
	cfg := filepath.Join(dir, "syncgo.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
db: syncgo.db
schema: %s
auth:
  issuer: https://issuer.test
  audience: [syncgo]
  hs256_secret: %s
%s`, schemaPath, e2eSecret, membersScopes)), 0o600))

	out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", cfg)
	if code != 0 || !strings.Contains(out, "list_id (2 rule(s), 1 query)") {
		t.Fatalf("config check: exit %d\n%s\n%s", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(bad, []byte(strings.Replace(string(must1(os.ReadFile(cfg))), "= :actor", "= :user", 1)), 0o600))
	if _, errOut, code := binarytest.Run(t, bin, nil, "config", "check", bad); code == 0 || !strings.Contains(errOut, ":user") {
		t.Fatalf("config check of a query with :user: exit %d\n%s", code, errOut)
	}

	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			args := []string{"-config", cfg}
			if driver == "postgres" {
				args = append(args, "-db", pgtest.Schema(t, "grantquery", false))
			}
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: t.TempDir()}, args...)
			ctx := context.Background()
			admin, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "root", "role": "admin"}), csc, sspclient.Options{})
			alice, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "alice"}), csc, sspclient.Options{})
			sync := func(c *sspclient.Client) {
				t.Helper()
				if _, err := c.SyncUntilQuiet(ctx, 20); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range []string{"t1", "t2"} {
				_, err := admin.Upsert("todos", todo(id, map[string]string{"t1": "l1", "t2": "l2"}[id]))
				must(t, err)
			}
			_, err := admin.Upsert("list_members", map[string]any{"id": "alice:l1", "list_id": "l1", "user_id": "alice"})
			must(t, err)
			sync(admin)

			must(t, alice.Subscribe("lists", "todos", map[string][]string{"list_id": {"l1", "l2"}}))
			sync(alice)
			if got := keys(alice.Rows("todos")); got != "t1" {
				t.Fatalf("alice's todos: %q; want t1 (her membership of l1 only)", got)
			}
			if st, _ := alice.Subscription("lists"); st.Status != wire.SubActive {
				t.Fatalf("alice's subscription: %+v; want active on l1", st)
			}

			// The membership is deleted: her next pull revokes l1.
			_, err = admin.Delete("list_members", "alice:l1")
			must(t, err)
			sync(admin)
			sync(alice)
			if got := keys(alice.Rows("todos")); got != "" {
				t.Fatalf("alice's todos after her membership was deleted: %q; want none", got)
			}
		})
	}
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
