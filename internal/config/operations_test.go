package config

import (
	"strings"
	"testing"
)

const validOperations = `
operations:
  max_watches: 8
  queries:
    - id: openTasks
      sql: "SELECT id, title FROM tasks WHERE project_id = :project AND done = false ORDER BY id"
      postgres_sql: "SELECT id, title FROM tasks WHERE project_id = :project AND NOT done ORDER BY id"
      tables: [tasks]
      params:
        - {name: project, type: string}
        - {name: since, type: integer, nullable: true}
      columns:
        - {name: id, type: string}
        - {name: title, type: string}
      coverage:
        - table: tasks
          scopes: {project_id: [":project"]}
      max_rows: 500
`

func TestOperationsLoad(t *testing.T) {
	c, err := Load(writeFile(t, validOperations), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	o := c.Operations
	if o.MaxWatches != 8 || len(o.Queries) != 1 {
		t.Fatalf("%+v", o)
	}
	q := o.Queries[0]
	if q.ID != "openTasks" || q.MaxRows != 500 || len(q.Params) != 2 || !q.Params[1].Nullable ||
		q.Columns[1].Name != "title" || q.Coverage[0].Scopes["project_id"][0] != ":project" || q.PostgresSQL == "" {
		t.Fatalf("%+v", q)
	}
}

func TestOperationsErrors(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown key", "max_rows: 500", "max_rows: 500\n      authorize: true", "field authorize not found"},
		{"param type", "{name: project, type: string}", "{name: project, type: text}", `param "project": unknown type "text"`},
		{"column type", "{name: title, type: string}", "{name: title, type: str}", `column "title": unknown type "str"`},
		{"no coverage", "      coverage:\n        - table: tasks\n          scopes: {project_id: [\":project\"]}\n", "", "coverage is required"},
		{"empty coverage", `[":project"]`, `[]`, "coverage of tasks.project_id is empty"},
		{"undeclared param", `[":project"]`, `[":proj"]`, "names :proj, which is not a declared non-nullable string param"},
		{"nullable param", "{name: project, type: string}", "{name: project, type: string, nullable: true}", "not a declared non-nullable string param"},
		{"non-string param", `[":project"]`, `[":since"]`, "names :since"},
		{"negative", "max_watches: 8", "max_watches: -1", "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(validOperations, c.from, c.to, 1)
			if body == validOperations {
				t.Fatal("the case changes nothing")
			}
			cfg, err := Load(writeFile(t, body), env(nil))
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
