package schema

import (
	"reflect"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// Tables of testSchema, by position.
const (
	projectsT = 0
	tasksT    = 1
	secretsT  = 2
)

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Schema)
		want   []string
	}{
		// Schema.
		{"version zero", func(s *Schema) { s.Version = 0 },
			[]string{"schema version 0 must be at least 1"}},

		// Identifiers.
		{"empty table name", func(s *Schema) { s.Tables[secretsT].Name = "" },
			[]string{"table name must not be empty"}},
		{"reserved table prefix", func(s *Schema) { s.Tables[secretsT].Name = "Sync_secrets" },
			[]string{`table name "Sync_secrets" uses a reserved prefix (sync_ and _sync belong to the server storage)`}},
		{"reserved column prefix", func(s *Schema) {
			s.Tables[secretsT].Columns[1].Name = "_SYNC_owner"
			s.Tables[secretsT].Scopes[0].Column = "_SYNC_owner"
		},
			[]string{`table "secrets": column name "_SYNC_owner" uses a reserved prefix (sync_ and _sync belong to the server storage)`}},
		{"table name too long", func(s *Schema) { s.Tables[secretsT].Name = strings.Repeat("s", 64) },
			[]string{`table name "` + strings.Repeat("s", 64) + `" is 64 bytes long, over the 63-byte identifier limit of PostgreSQL`}},
		{"leading digit", func(s *Schema) { s.Tables[secretsT].Name = "1secrets" },
			[]string{`table name "1secrets" is not a portable identifier (ASCII letters, digits and underscores, not starting with a digit)`}},
		{"non-ASCII column", func(s *Schema) { s.Tables[projectsT].Columns[1].Name = "näme" },
			[]string{`table "projects": column name "näme" is not a portable identifier (ASCII letters, digits and underscores, not starting with a digit)`}},
		{"hyphen in index", func(s *Schema) { s.Tables[tasksT].Indexes[1].Name = "by-title" },
			[]string{`table "tasks": index name "by-title" is not a portable identifier (ASCII letters, digits and underscores, not starting with a digit)`}},

		// Uniqueness.
		{"duplicate table", func(s *Schema) { s.Tables = append(s.Tables, s.Tables[secretsT]) },
			[]string{`duplicate table "secrets"`}},
		{"duplicate table by case", func(s *Schema) { s.Tables = append(s.Tables, s.Tables[secretsT]); s.Tables[3].Name = "Secrets" },
			[]string{`duplicate table "Secrets" (same as "secrets" but for case, which SQLite does not distinguish)`}},
		{"duplicate column", func(s *Schema) { s.Tables[projectsT].Columns = append(s.Tables[projectsT].Columns, String("name")) },
			[]string{`table "projects": duplicate column "name"`}},
		{"duplicate column by case", func(s *Schema) { s.Tables[projectsT].Columns = append(s.Tables[projectsT].Columns, String("Name")) },
			[]string{`table "projects": duplicate column "Name" (same as "name" but for case, which SQLite does not distinguish)`}},
		{"duplicate index in table", func(s *Schema) { s.Tables[tasksT].Indexes[1].Name = "tasks_by_project" },
			[]string{`table "tasks": duplicate index "tasks_by_project" (index names are unique in the schema; another is declared on table "tasks")`}},
		{"duplicate index across tables", func(s *Schema) {
			s.Tables[projectsT].Indexes = []Index{{Name: "Tasks_By_Project", Columns: []string{"name"}}}
		}, []string{`table "tasks": duplicate index "tasks_by_project" (index names are unique in the schema; another is declared on table "projects")`}},
		{"physical index names collide", func(s *Schema) {
			// The physical name of "c"×56 is sync_ix_ and its FNV-1a hash.
			s.Tables[projectsT].Indexes = []Index{{Name: strings.Repeat("c", 56), Columns: []string{"name"}}, {Name: "de34b3d5b2af79fd", Columns: []string{"id"}}}
		}, []string{`table "projects": index "de34b3d5b2af79fd" has the physical name "sync_ix_de34b3d5b2af79fd" of index "` + strings.Repeat("c", 56) + `"`}},

		{"index on a table that is not materialized", func(s *Schema) {
			s.Tables[secretsT].Indexes = []Index{{Name: "secrets_by_owner", Columns: []string{"owner_id"}}}
		}, []string{`table "secrets": declares indexes but is not materialized: an index needs the typed columns a materialized table stores (set materialize: true, or drop the indexes)`}},
		{"reference from a table that is not materialized", func(s *Schema) {
			off := false
			s.Tables[tasksT].Materialize = &off
		}, []string{`table "tasks": declares indexes but is not materialized: an index needs the typed columns a materialized table stores (set materialize: true, or drop the indexes)`,
			`table "tasks": declares references but is not materialized: the server finds a parent's children through the reference column, which only a materialized table stores (set materialize: true)`}},

		// Columns.
		{"invalid type", func(s *Schema) { s.Tables[projectsT].Columns[1].Type = 0 },
			[]string{`table "projects": column "name": invalid column type 0`}},
		{"crdt without crdtType", func(s *Schema) { s.Tables[tasksT].Columns[4].CRDTType = "" },
			[]string{`table "tasks": column "notes": a crdt column must declare a crdtType (§5.10.1)`}},
		{"crdtType on a string column", func(s *Schema) { s.Tables[tasksT].Columns[2].CRDTType = CRDTYjsDoc },
			[]string{`table "tasks": column "title": crdtType "yjs-doc" is only for crdt columns, and the type is string`}},
		{"encrypted string", func(s *Schema) { s.Tables[tasksT].Columns[6].Type = wire.TypeString },
			[]string{`table "tasks": column "body": an encrypted column has type bytes, not string (§5.11)`}},
		{"encrypted crdt", func(s *Schema) {
			s.Tables[tasksT].Columns[4].Encrypted = true
			s.Tables[tasksT].Columns[4].DeclaredType = "bytes"
		},
			[]string{`table "tasks": column "notes": a crdt column cannot be encrypted: the server merges crdt state in plaintext (§5.11)`}},
		{"encrypted without declaredType", func(s *Schema) { s.Tables[tasksT].Columns[6].DeclaredType = "" },
			[]string{`table "tasks": column "body": an encrypted column must declare a declaredType (§5.11)`}},
		{"unknown declaredType", func(s *Schema) { s.Tables[tasksT].Columns[6].DeclaredType = "text" },
			[]string{`table "tasks": column "body": unknown declaredType "text"`}},
		{"declaredType crdt", func(s *Schema) { s.Tables[tasksT].Columns[6].DeclaredType = "crdt" },
			[]string{`table "tasks": column "body": declaredType crdt cannot be encrypted (§5.11)`}},
		{"declaredType without encrypted", func(s *Schema) { s.Tables[tasksT].Columns[6].Encrypted = false },
			[]string{`table "tasks": column "body": declaredType is only for encrypted columns (§5.11)`}},

		// Primary key.
		{"missing primary key", func(s *Schema) { s.Tables[secretsT].PrimaryKey = "key" },
			[]string{`table "secrets": primary key "key" is not a column`}},
		{"nullable primary key", func(s *Schema) { s.Tables[secretsT].Columns[0].Nullable = true },
			[]string{`table "secrets": primary key "id" must not be nullable`}},
		{"float primary key", func(s *Schema) { s.Tables[secretsT].Columns[0].Type = wire.TypeFloat },
			[]string{`table "secrets": primary key "id" has type float; a primary key is string, integer, boolean or json (§2.4)`}},
		{"bytes primary key", func(s *Schema) { s.Tables[secretsT].Columns[0].Type = wire.TypeBytes },
			[]string{`table "secrets": primary key "id" has type bytes; a primary key is string, integer, boolean or json (§2.4)`}},
		{"blob_ref primary key", func(s *Schema) { s.Tables[secretsT].Columns[0].Type = wire.TypeBlobRef },
			[]string{`table "secrets": primary key "id" has type blob_ref; a primary key is string, integer, boolean or json (§2.4)`}},
		{"crdt primary key", func(s *Schema) { s.Tables[tasksT].PrimaryKey = "notes"; s.Tables[tasksT].Columns[4].Nullable = false },
			[]string{`table "tasks": primary key "notes" has type crdt; a primary key is string, integer, boolean or json (§2.4)`}},
		{"encrypted primary key", func(s *Schema) { s.Tables[secretsT].PrimaryKey = "secret" },
			[]string{`table "secrets": primary key "secret" cannot be encrypted: it renders the plaintext rowId (§5.11)`}},

		// Scopes.
		{"no scopes", func(s *Schema) { s.Tables[secretsT].Scopes = nil },
			[]string{`table "secrets": every synced table declares at least one scope pattern (§3.1)`}},
		{"pattern without variable", func(s *Schema) { s.Tables[secretsT].Scopes[0].Pattern = "owner" },
			[]string{`table "secrets": scope pattern "owner" must be 'prefix:{variable}' with exactly one variable`}},
		{"pattern with two variables", func(s *Schema) { s.Tables[secretsT].Scopes[0].Pattern = "owner:{owner_id}{x}" },
			[]string{`table "secrets": scope pattern "owner:{owner_id}{x}" must be 'prefix:{variable}' with exactly one variable`}},
		{"unknown scope column by variable", func(s *Schema) { s.Tables[secretsT].Scopes[0].Pattern = "owner:{owner}" },
			[]string{`table "secrets": scope pattern "owner:{owner}" names unknown column "owner"`}},
		{"unknown explicit scope column", func(s *Schema) { s.Tables[projectsT].Scopes[0].Column = "project_id" },
			[]string{`table "projects": scope pattern "project:{project_id}" names unknown column "project_id"`}},
		{"variable with two columns", func(s *Schema) {
			s.Tables[secretsT].Scopes = append(s.Tables[secretsT].Scopes, Scope{Pattern: "user:{owner_id}", Column: "id"})
		}, []string{`table "secrets": variable "owner_id" maps to two different columns, "owner_id" and "id" (§3.1)`}},
		{"encrypted scope column", func(s *Schema) { s.Tables[secretsT].Scopes[0] = Scope{Pattern: "owner:{owner_id}", Column: "secret"} },
			[]string{`table "secrets": scope column "secret" cannot be encrypted: the server reads scope values in plaintext (§3.1, §5.11)`}},
		{"bytes scope column", func(s *Schema) { s.Tables[secretsT].Columns[1].Type = wire.TypeBytes },
			[]string{`table "secrets": scope column "owner_id" has type bytes, which has no string form for a scope value (§3.1, §5.10.1)`}},
		{"crdt scope column", func(s *Schema) { s.Tables[secretsT].Columns[1] = CRDT("owner_id", CRDTYjsDoc) },
			[]string{`table "secrets": scope column "owner_id" has type crdt, which has no string form for a scope value (§3.1, §5.10.1)`}},

		// Indexes.
		{"reserved index prefix", func(s *Schema) { s.Tables[tasksT].Indexes[1].Name = "sync_ix_title" },
			[]string{`table "tasks": index name "sync_ix_title" uses a reserved prefix (sync_ and _sync belong to the server storage)`}},
		{"index without columns", func(s *Schema) { s.Tables[tasksT].Indexes[1].Columns = nil },
			[]string{`table "tasks": index "tasks_by_org_title" must name at least one column`}},
		{"index of unknown column", func(s *Schema) { s.Tables[tasksT].Indexes[1].Columns[1] = "tilte" },
			[]string{`table "tasks": index "tasks_by_org_title" names unknown column "tilte"`}},
		{"index names a column twice", func(s *Schema) { s.Tables[tasksT].Indexes[1].Columns[1] = "org_id" },
			[]string{`table "tasks": index "tasks_by_org_title" names column "org_id" twice`}},

		// References.
		{"reference of unknown column", func(s *Schema) { s.Tables[tasksT].References[0].Column = "projectid" },
			[]string{`table "tasks": reference column "projectid" is not a column`}},
		{"two references on one column", func(s *Schema) {
			s.Tables[tasksT].References = append(s.Tables[tasksT].References, s.Tables[tasksT].References[0])
		},
			[]string{`table "tasks": column "project_id" declares more than one reference`}},
		{"unknown onDelete", func(s *Schema) { s.Tables[tasksT].References[0].OnDelete = "NO ACTION" },
			[]string{`table "tasks": reference column "project_id": unknown onDelete "NO ACTION" (use RESTRICT, CASCADE or SET NULL)`}},
		{"unknown parent", func(s *Schema) { s.Tables[tasksT].References[0].ParentTable = "project" },
			[]string{`table "tasks": reference column "project_id" names unknown table "project"`}},
		{"type differs from the parent key", func(s *Schema) {
			s.Tables[tasksT].References[0].Column = "org_id"
			s.Tables[tasksT].Indexes[0].Columns[0] = "org_id"
		},
			[]string{`table "tasks": reference column "org_id" has type integer but projects.id has type string; the types must match (§6.11)`}},
		{"SET NULL on a non-nullable column", func(s *Schema) { s.Tables[tasksT].References[0].OnDelete = OnDeleteSetNull },
			[]string{`table "tasks": reference column "project_id" is not nullable but declares ON DELETE SET NULL (§6.11)`}},
		{"scope patterns differ", func(s *Schema) { s.Tables[projectsT].Scopes[0].Pattern = "proj:{project_id}" },
			[]string{`table "tasks": reference column "project_id" targets "projects", whose scope patterns differ; a cascade must not cross an authorization boundary (§6.11)`}},
		{"no index on the reference column", func(s *Schema) { s.Tables[tasksT].Indexes[0].Columns = []string{"project_id", "id"} },
			[]string{`table "tasks": reference column "project_id" needs a declared single-column index so the server can find the children of a parent (§6.11)`}},

		// Several problems at once are all reported.
		{"every problem", func(s *Schema) {
			s.Version = -1
			s.Tables[projectsT].Columns[0].Nullable = true
			s.Tables[secretsT].Scopes = nil
		}, []string{
			"schema version -1 must be at least 1",
			`table "projects": primary key "id" must not be nullable`,
			`table "secrets": every synced table declares at least one scope pattern (§3.1)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := testSchema()
			tt.mutate(s)
			_, err := Compile(s)
			if err == nil {
				t.Fatalf("Compile succeeded, want errors %q", tt.want)
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
