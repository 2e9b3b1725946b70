package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sspclient"
)

const openTodosOperations = `operations:
  queries:
    - id: openTodos
      sql: "SELECT id, title FROM todos WHERE list_id = :list AND done = false ORDER BY id"
      params:
        - {name: list, type: string}
      columns:
        - {name: id, type: string}
        - {name: title, type: string}
      coverage:
        - table: todos
          scopes: {list_id: [":list"]}
      max_rows: 100
`

// A query declared in the config file is served by `syncgo serve`: its
// caller gets the rows of a list it may read, and is refused one it may
// not (operation.forbidden); on SQLite and on Postgres.
func TestBinaryConfigOperations(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testBinaryConfigOperations(t, "") })
	t.Run("postgres", func(t *testing.T) { testBinaryConfigOperations(t, pgtest.Schema(t, "opscfg", false)) })
}

func testBinaryConfigOperations(t *testing.T, db string) {
	sc, schemaPath := exampleSchema(t)
	cfg := writeConfig(t, schemaPath, "  hs256_secret: "+e2eSecret+"\n")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(openTodosOperations)
	must(t, err)
	must(t, f.Close())

	bin := binarytest.Build(t)
	if out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", cfg); code != 0 {
		t.Fatalf("config check: %d\n%s\n%s", code, out, errOut)
	}
	args := []string{"-config", cfg}
	if db != "" {
		args = append(args, "-db", db)
	}
	p := binarytest.Serve(t, bin, binarytest.Options{}, args...)
	tok := hs(t, map[string]any{"sub": "alice", "lists": []string{"l1"}})
	alice, _ := sspclient.New(p.URL, tok, sc, sspclient.Options{})
	for _, id := range []string{"a2", "a1"} {
		if _, err := alice.Upsert("todos", todo(id, "l1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := alice.SyncUntilQuiet(context.Background(), 20); err != nil {
		t.Fatal(err)
	}

	call := func(list string) map[string]any {
		t.Helper()
		req := remotewire.Object{
			{Key: "revision", Value: int64(1)}, {Key: "kind", Value: "query"},
			{Key: "clientId", Value: "ops-e2e"}, {Key: "operationId", Value: "openTodos"},
			{Key: "params", Value: remotewire.Object{{Key: "list", Value: list}}},
		}
		body, err := remotewire.Encode(nil, req)
		must(t, err)
		hr, err := http.NewRequest("POST", p.URL+"/operations", bytes.NewReader(body))
		must(t, err)
		hr.Header.Set("Content-Type", remotewire.ContentType)
		hr.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(hr)
		must(t, err)
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /operations: %d %s", resp.StatusCode, data)
		}
		v, err := remotewire.Decode(data)
		must(t, err)
		obj, ok := v.(remotewire.Object)
		if !ok {
			t.Fatalf("response is not an object: %s", data)
		}
		return obj.Map()
	}

	got := call("l1")
	if got["kind"] != "query" {
		t.Fatalf("list l1: %v", got)
	}
	rows, _ := got["rows"].([]any)
	var ids []string
	for _, r := range rows {
		row, _ := r.(remotewire.Object)
		m := row.Map()
		if len(m) != 2 || m["title"] != m["id"] {
			t.Fatalf("row %v: want exactly id and title", m)
		}
		ids = append(ids, m["id"].(string))
	}
	if len(ids) != 2 || ids[0] != "a1" || ids[1] != "a2" {
		t.Fatalf("rows %v: want a1, a2 in order", ids)
	}
	if got := call("l2"); got["kind"] != "error" || got["code"] != "operation.forbidden" {
		t.Fatalf("list l2, outside alice's scopes: %v", got)
	}
}
