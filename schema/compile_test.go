package schema

import (
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// testSchema is a valid schema that exercises every feature: three tables,
// a reference, crdt, blob_ref and encrypted columns, an explicit scope
// column, and a table whose materialization defaults to off.
func testSchema() *Schema {
	return New(3).
		Table("projects", "id",
			String("id"),
			String("name").Null(),
		).
		ScopeColumn("project:{project_id}", "id").
		Table("tasks", "id",
			String("id"),
			String("project_id"),
			String("title").Null(),
			Boolean("done"),
			CRDT("notes", CRDTYjsDoc).Null(),
			BlobRef("attachment").Null(),
			Encrypted("body", wire.TypeString).Null(),
			Integer("org_id"),
		).
		Scope("project:{project_id}").
		Index("tasks_by_project", "project_id").
		UniqueIndex("tasks_by_org_title", "org_id", "title").
		Reference("project_id", "projects", OnDeleteCascade).
		Table("secrets", "id",
			String("id"),
			Integer("owner_id"),
			Encrypted("secret", wire.TypeJSON),
		).
		Scope("owner:{owner_id}").
		Schema()
}

func mustCompile(t *testing.T, s *Schema) *Compiled {
	t.Helper()
	c, err := Compile(s)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

func TestCompileDerives(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, testSchema())

	if got, want := c.Version(), int32(3); got != want {
		t.Errorf("Version = %d, want %d", got, want)
	}
	var names []string
	for _, ct := range c.Tables() {
		names = append(names, ct.Name())
	}
	if want := []string{"projects", "tasks", "secrets"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tables = %q, want %q", names, want)
	}
	if got, want := c.Variables(), []string{"owner_id", "project_id"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Variables = %q, want %q", got, want)
	}
	if !c.DeclaresVariable("owner_id") || c.DeclaresVariable("org_id") {
		t.Errorf("DeclaresVariable: owner_id %t, org_id %t; want true, false",
			c.DeclaresVariable("owner_id"), c.DeclaresVariable("org_id"))
	}
	if _, ok := c.Table("nope"); ok {
		t.Errorf("Table(nope) found")
	}

	tasks, _ := c.Table("tasks")
	if i, ok := tasks.ColumnIndex("done"); !ok || i != 3 {
		t.Errorf("ColumnIndex(done) = %d, %t; want 3, true", i, ok)
	}
	if got := tasks.PrimaryKey(); got != 0 {
		t.Errorf("PrimaryKey = %d, want 0", got)
	}
	if got := tasks.Variables(); !reflect.DeepEqual(got, []string{"project_id"}) {
		t.Errorf("table Variables = %q, want [project_id]", got)
	}
	if i, ok := tasks.VariableColumn("project_id"); !ok || i != 1 {
		t.Errorf("VariableColumn(project_id) = %d, %t; want 1, true", i, ok)
	}
	wantScopes := []CompiledScope{{Pattern: Pattern{Prefix: "project", Variable: "project_id"}, Column: "project_id", ColumnIndex: 1}}
	if got := tasks.Scopes(); !reflect.DeepEqual(got, wantScopes) {
		t.Errorf("Scopes = %+v, want %+v", got, wantScopes)
	}
	for _, tc := range []struct {
		name      string
		got, want []int
	}{
		{"BlobRefColumns", tasks.BlobRefColumns(), []int{5}},
		{"CRDTColumns", tasks.CRDTColumns(), []int{4}},
		{"EncryptedColumns", tasks.EncryptedColumns(), []int{6}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	wantIndexes := []CompiledIndex{
		{Name: "tasks_by_project", PhysicalName: "sync_ix_tasks_by_project", Columns: []string{"project_id"}},
		{Name: "tasks_by_org_title", PhysicalName: "sync_ix_tasks_by_org_title", Columns: []string{"org_id", "title"}, Unique: true},
	}
	if got := tasks.Indexes(); !reflect.DeepEqual(got, wantIndexes) {
		t.Errorf("Indexes = %+v, want %+v", got, wantIndexes)
	}
	wantRefs := []CompiledReference{{Column: "project_id", ColumnIndex: 1, ParentTable: "projects", OnDelete: OnDeleteCascade}}
	if got := tasks.References(); !reflect.DeepEqual(got, wantRefs) {
		t.Errorf("References = %+v, want %+v", got, wantRefs)
	}
	projects, _ := c.Table("projects")
	wantIncoming := []IncomingReference{{Table: "tasks", Column: "project_id", ColumnIndex: 1, OnDelete: OnDeleteCascade, Index: "tasks_by_project"}}
	if got := projects.ReferencedBy(); !reflect.DeepEqual(got, wantIncoming) {
		t.Errorf("ReferencedBy = %+v, want %+v", got, wantIncoming)
	}
	wantWire := []wire.Column{{Name: "id", Type: wire.TypeString}, {Name: "name", Type: wire.TypeString, Nullable: true}}
	if got := projects.WireColumns(); !reflect.DeepEqual(got, wantWire) {
		t.Errorf("WireColumns = %+v, want %+v", got, wantWire)
	}
}

func TestCompileRowCodec(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, testSchema())
	for _, ct := range c.Tables() {
		codec := ct.RowCodec()
		if codec == nil {
			t.Fatalf("table %s: no row codec", ct.Name())
		}
		if !reflect.DeepEqual(codec.Columns(), ct.WireColumns()) || codec.PrimaryKey() != ct.PrimaryKey() {
			t.Errorf("table %s: codec columns %+v, key %d; want %+v, %d",
				ct.Name(), codec.Columns(), codec.PrimaryKey(), ct.WireColumns(), ct.PrimaryKey())
		}
	}
	projects, _ := c.Table("projects")
	row := []wire.Value{{Str: "p1"}, {Null: true}}
	b, err := projects.RowCodec().AppendRow(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	got, err := projects.RowCodec().DecodeRow(b)
	if err != nil || !reflect.DeepEqual(got, row) {
		t.Errorf("DecodeRow = %+v, %v; want %+v", got, err, row)
	}
}

func TestCompileMaterialize(t *testing.T) {
	t.Parallel()
	on, off := true, false
	tests := []struct {
		name   string
		mutate func(*Schema)
		table  string
		want   bool
	}{
		{"default on", func(*Schema) {}, "tasks", true},
		{"all projectable columns encrypted", func(*Schema) {}, "secrets", false},
		{"explicit on wins", func(s *Schema) { s.Tables[2].Materialize = &on }, "secrets", true},
		{"explicit off wins", func(s *Schema) {
			s.Tables[1].Materialize = &off
			s.Tables[1].Indexes, s.Tables[1].References = nil, nil // they need a materialized table
		}, "tasks", false},
		{"only key and scope columns", func(*Schema) {}, "projects", true},
		{"one plaintext column keeps it on", func(s *Schema) {
			s.Tables[2].Columns = append(s.Tables[2].Columns, String("label").Null())
		}, "secrets", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := testSchema()
			tt.mutate(s)
			ct, _ := mustCompile(t, s).Table(tt.table)
			if got := ct.Materialize(); got != tt.want {
				t.Errorf("Materialize = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestCompileAcceptsEligibleTypes(t *testing.T) {
	t.Parallel()
	for _, typ := range []wire.ColumnType{wire.TypeString, wire.TypeInteger, wire.TypeBoolean, wire.TypeJSON} {
		// A scope column may be any type with a string form, float included.
		scopeTypes := []wire.ColumnType{wire.TypeString, wire.TypeInteger, wire.TypeFloat, wire.TypeBoolean, wire.TypeJSON, wire.TypeBlobRef}
		for _, scopeType := range scopeTypes {
			s := New(1).Table("t", "k",
				Column{Name: "k", Type: typ},
				Column{Name: "s", Type: scopeType, Nullable: true},
			).Scope("x:{s}").Schema()
			if _, err := Compile(s); err != nil {
				t.Errorf("key %s, scope %s: %v", typ, scopeType, err)
			}
		}
	}
}

func TestCompileDoesNotAlias(t *testing.T) {
	t.Parallel()
	s := testSchema()
	c := mustCompile(t, s)
	s.Tables[0].Columns[1].Name = "renamed"
	s.Tables[1].Indexes[0].Columns[0] = "title"
	projects, _ := c.Table("projects")
	tasks, _ := c.Table("tasks")
	if got := projects.Columns()[1].Name; got != "name" {
		t.Errorf("compiled column renamed to %q through the source schema", got)
	}
	if got := tasks.Indexes()[0].Columns[0]; got != "project_id" {
		t.Errorf("compiled index column changed to %q through the source schema", got)
	}
}

func TestCompileNil(t *testing.T) {
	t.Parallel()
	if _, err := Compile(nil); err == nil {
		t.Fatal("Compile(nil) succeeded")
	}
}
