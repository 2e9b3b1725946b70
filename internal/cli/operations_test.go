package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/config"
)

// The demo schema: projects and tasks scoped by project_id.
func demoQuery() config.Query {
	return config.Query{
		ID:      "openTasks",
		SQL:     "SELECT id, title FROM tasks WHERE project_id = :project ORDER BY id",
		Params:  []config.Column{{Name: "project", Type: "string"}},
		Columns: []config.Column{{Name: "id", Type: "string"}, {Name: "title", Type: "string"}},
		Coverage: []config.Coverage{{Table: "tasks",
			Scopes: map[string][]string{"project_id": {":project"}}}},
		MaxRows: 100,
	}
}

// config check compiles the declared queries against the schema with
// the library's checks.
func TestCheckConfigOperations(t *testing.T) {
	base := config.Default()
	base.DB = filepath.Join(t.TempDir(), "x.db")
	base.Auth.Mode = config.ModeDev
	cfg := base
	cfg.Operations.Queries = []config.Query{demoQuery()}
	if _, _, err := checkConfig(cfg); err != nil {
		t.Fatalf("valid query: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(q *config.Query)
		want string
	}{
		{"bad SQL", func(q *config.Query) { q.SQL = "DELETE FROM tasks" }, "openTasks"},
		{"unknown table", func(q *config.Query) { q.SQL = "SELECT id FROM nope" }, "the SQL does not read (it reads [])"},
		{"undeclared param", func(q *config.Query) { q.SQL += " LIMIT :n" }, ":n, which Params does not declare"},
		{"bad postgres SQL", func(q *config.Query) { q.PostgresSQL = "SELECT id FROM nope" }, "(postgres_sql)"},
		{"tables mismatch", func(q *config.Query) { q.Tables = []string{"projects"} }, "Tables lists"},
		{"max rows", func(q *config.Query) { q.MaxRows = 0 }, "MaxRows"},
		{"no columns", func(q *config.Query) { q.Columns = nil }, "Columns"},
		{"duplicate id", nil, "unique"},
		{"coverage of another table", func(q *config.Query) { q.Coverage[0].Table = "projects" }, "does not read"},
		{"coverage incomplete", func(q *config.Query) {
			q.SQL = "SELECT t.id, t.title FROM tasks t JOIN projects p ON p.id = t.project_id WHERE t.project_id = :project"
		}, "coverage must name each"},
		{"coverage of another variable", func(q *config.Query) {
			q.Coverage[0].Scopes = map[string][]string{"id": {"*"}}
		}, "exactly its scope variables"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			q := demoQuery()
			cfg.Operations.Queries = []config.Query{q, q}
			if c.edit != nil {
				c.edit(&q)
				cfg.Operations.Queries = []config.Query{q}
			}
			_, _, err := checkConfig(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "operations: ") {
				t.Fatalf("got %v, want operations: …%q", err, c.want)
			}
		})
	}
	// The built Coverage substitutes the request's param.
	ops := buildOperations(config.Operations{Queries: []config.Query{demoQuery()}})
	cov, err := ops.Queries[0].Coverage(map[string]any{"project": "p1"})
	if err != nil || len(cov) != 1 || cov[0].Table != "tasks" || cov[0].Scopes["project_id"][0] != "p1" {
		t.Fatalf("coverage %+v, %v", cov, err)
	}
}
