package remotesql

import (
	"reflect"
	"strings"
	"testing"
)

var testSchema = Schema{"tasks": true, "projects": true, "secrets": false}

func TestParseAccepts(t *testing.T) {
	cases := []struct {
		sql    string
		d      Dialect
		params []string
		tables []string
	}{
		{"SELECT id, title FROM tasks WHERE project_id = :project ORDER BY id", SQLite, []string{"project"}, []string{"tasks"}},
		{"select t.id from tasks t join projects p on p.id = t.project_id where t.rank > :min and t.rank < :min + 10;  -- end",
			Postgres, []string{"min"}, []string{"projects", "tasks"}},
		{`WITH x AS (SELECT * FROM "tasks") SELECT * FROM x WHERE title = 'tasks FROM main.tasks' /* main.tasks */`,
			SQLite, nil, []string{"tasks"}},
		{"SELECT notes::jsonb ? 'k' AS has, :p::text AS p FROM tasks", Postgres, []string{"p"}, []string{"tasks"}},
		{"SELECT $$ main.tasks $$, E'\\' main.tasks', $q$x$q$ FROM tasks", Postgres, nil, []string{"tasks"}},
		{"SELECT [title], `id` FROM tasks WHERE x'00' <> :b", SQLite, []string{"b"}, []string{"tasks"}},
		{"SELECT 1.5e-3, .5, 'it''s' WHERE :a = :a", SQLite, []string{"a"}, nil},
		{"VALUES (1)", SQLite, nil, nil},
		{"SELECT /* nested /* twice */ still */ 1", Postgres, nil, nil},
	}
	for _, c := range cases {
		st, err := Parse(c.sql, c.d, testSchema)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.sql, err)
			continue
		}
		if !reflect.DeepEqual(st.Params, c.params) || !reflect.DeepEqual(st.Tables, c.tables) {
			t.Errorf("Parse(%q): params %v tables %v, want %v %v", c.sql, st.Params, st.Tables, c.params, c.tables)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		sql  string
		d    Dialect
		want string
	}{
		{"SELECT * FROM main.tasks", SQLite, "qualified"},
		{`SELECT * FROM "public"."tasks"`, Postgres, "qualified"},
		{"SELECT * FROM public . TASKS", Postgres, "qualified"},
		{"SELECT * FROM secrets", SQLite, "not materialized"},
		{"SELECT _sync_partition FROM tasks", SQLite, "storage-internal"},
		{"SELECT * FROM sync_commits", Postgres, "storage-internal"},
		{`SELECT * FROM "SYNC_changes"`, SQLite, "storage-internal"},
		{"SELECT * FROM tasks WHERE id = ?", SQLite, ":name"},
		{"SELECT * FROM tasks WHERE id = $1", Postgres, "positional"},
		{"SELECT * FROM tasks WHERE id = @id", SQLite, ":name"},
		{"SELECT * FROM tasks WHERE id = $id", SQLite, ":name"},
		{"SELECT 1; SELECT 2", SQLite, "one statement"},
		{"DELETE FROM tasks", SQLite, "must be a SELECT"},
		{"  -- nothing\n", SQLite, "empty"},
		{"SELECT 'open", SQLite, "unterminated"},
		{"SELECT /* open", Postgres, "unterminated"},
		{"SELECT $a$ open", Postgres, "unterminated"},
		{"SELECT [open", SQLite, "unterminated"},
	}
	for _, c := range cases {
		_, err := Parse(c.sql, c.d, testSchema)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error about %q", c.sql, err, c.want)
		}
	}
}

func TestCompose(t *testing.T) {
	st, err := Parse("SELECT id FROM tasks WHERE title <> :t AND rank > :r", SQLite, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rels := []Relation{{Table: "tasks", Columns: []string{"id", "title"},
		Scopes: []ScopeFilter{{Variable: "project_id", Values: []string{"p1", `p"2`}}}}}
	got, err := st.Compose(Target{Dialect: SQLite, Schema: "main"}, "part", rels, map[string]any{"t": "x", "r": int64(3)}, 11)
	if err != nil {
		t.Fatal(err)
	}
	want := `WITH "tasks" AS NOT MATERIALIZED (SELECT t."id", t."title" FROM "main"."tasks" AS t WHERE t."_sync_partition" = ?1` +
		` AND EXISTS (SELECT 1 FROM "main".sync_row_scopes AS s WHERE s.partition = ?1 AND s.tbl = 'tasks' AND s.var = 'project_id'` +
		` AND s.row_id = t."_sync_row_id" AND s.value IN (SELECT value FROM json_each(?2))))` +
		` SELECT * FROM (SELECT id FROM tasks WHERE title <> ?3 AND rank > ?4` + "\n" + `) AS "_syncgo_query" LIMIT ?5`
	if got.SQL != want {
		t.Fatalf("composed\n%s\nwant\n%s", got.SQL, want)
	}
	wantArgs := []any{"part", `["p1","p\"2"]`, "x", int64(3), int64(11)}
	if !reflect.DeepEqual(got.Args, wantArgs) {
		t.Fatalf("args %#v, want %#v", got.Args, wantArgs)
	}
	pg, err := Parse("SELECT id FROM tasks WHERE title <> :t", Postgres, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	got, err = pg.Compose(Target{Dialect: Postgres, Schema: "s1"}, "part", rels, map[string]any{"t": "x"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.SQL, `s.value = ANY($2::text[])`) || !strings.Contains(got.SQL, `title <> $3`) ||
		!strings.HasSuffix(got.SQL, `LIMIT $4`) || !strings.Contains(got.SQL, `FROM "s1"."tasks" AS t`) {
		t.Fatalf("postgres composition:\n%s", got.SQL)
	}
	if _, err := st.Compose(Target{Dialect: SQLite, Schema: "main"}, "part", nil, map[string]any{"t": "x", "r": 1}, 1); err == nil {
		t.Fatal("composed without a relation for tasks")
	}
	if _, err := st.Compose(Target{Dialect: SQLite, Schema: "main"}, "part", rels, map[string]any{"t": "x"}, 1); err == nil {
		t.Fatal("composed without a value for :r")
	}
}

// FuzzParse: the lexer never panics, and an accepted statement's parts
// rebuild its text (parameters written back as :name) up to a final
// semicolon.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"SELECT * FROM tasks WHERE a = :a", "SELECT $x$ tasks $x$ ::text", "SELECT [a] FROM `b`",
		"SELECT 'x''y' -- c\n;", "/* a /* b */ */ SELECT E'\\'' "} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, sql string, pg bool) {
		d := SQLite
		if pg {
			d = Postgres
		}
		st, err := Parse(sql, d, testSchema)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, p := range st.parts {
			b.WriteString(p.text)
			if p.param >= 0 {
				b.WriteString(":" + st.Params[p.param])
			}
		}
		rebuilt := b.String()
		if rebuilt != sql && !strings.HasPrefix(sql, rebuilt+";") {
			t.Fatalf("parts rebuild %q from %q", rebuilt, sql)
		}
		for _, tb := range st.Tables {
			if !testSchema[tb] {
				t.Fatalf("accepted a reference to %q", tb)
			}
		}
	})
}

func TestComposeEach(t *testing.T) {
	st, err := Parse("SELECT id FROM tasks WHERE owner = :actor AND rank > :min OR owner = :actor", Postgres, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	target := Target{Dialect: Postgres, Schema: "app"}
	rels := []Relation{{Table: "tasks", Columns: []string{"id", "owner", "rank"}}}
	c, err := st.ComposeEach(target, "p1", rels, map[string]any{"min": int64(3)}, "actor", []string{"a", "b"}, 11, 20)
	if err != nil {
		t.Fatal(err)
	}
	want := `WITH "tasks" AS NOT MATERIALIZED (SELECT t."id", t."owner", t."rank" FROM "app"."tasks" AS t WHERE t."_sync_partition" = $1) ` +
		`SELECT "_syncgo_each".v AS "_syncgo_each", "_syncgo_query".* FROM unnest($2::text[]) AS "_syncgo_each"(v) CROSS JOIN LATERAL (` +
		`SELECT * FROM (SELECT id FROM tasks WHERE owner = "_syncgo_each".v AND rank > $3 OR owner = "_syncgo_each".v` +
		"\n" + `) AS "_syncgo_query" LIMIT $4) AS "_syncgo_query" LIMIT $5`
	if c.SQL != want {
		t.Fatalf("SQL\n%s\nwant\n%s", c.SQL, want)
	}
	if !reflect.DeepEqual(c.Args, []any{"p1", []string{"a", "b"}, int64(3), int64(11), int64(20)}) {
		t.Fatalf("args %#v", c.Args)
	}
	if _, err := st.ComposeEach(target, "p1", rels, nil, "nope", []string{"a"}, 1, 1); err == nil {
		t.Fatal("ComposeEach over a parameter the statement lacks")
	}
	if _, err := st.ComposeEach(target, "p1", rels, nil, "actor", []string{"a"}, 1, 1); err == nil {
		t.Fatal("ComposeEach without a value for :min")
	}
	lite, err := Parse("SELECT id FROM tasks WHERE owner = :actor", SQLite, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lite.ComposeEach(Target{Dialect: SQLite, Schema: "main"}, "p1", rels, nil, "actor", []string{"a"}, 1, 1); err == nil {
		t.Fatal("ComposeEach on SQLite")
	}
}
