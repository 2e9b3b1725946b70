package schema

import (
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

func TestBuilderMatchesJSON(t *testing.T) {
	t.Parallel()
	fromJSON, err := ParseJSON([]byte(fullDocument))
	if err != nil {
		t.Fatal(err)
	}
	built := New(7).
		Table("projects", "id", Integer("id")).
		ScopeColumn("project:{project_id}", "id").
		Materialize(false).
		Table("tasks", "id",
			String("id"),
			Integer("project_id").Null(),
			Float("score").Null(),
			JSON("meta").Null(),
			Boolean("done"),
			BlobRef("file").Null(),
			CRDT("doc", CRDTYjsDoc).Null(),
			Encrypted("body", wire.TypeJSON).Null(),
		).
		Scope("project:{project_id}").
		Index("tasks_by_project", "project_id").
		UniqueIndex("tasks_by_done", "done", "id").
		Reference("project_id", "projects", OnDeleteSetNull).
		Materialize(true).
		Schema()
	// The builder has no use for client-only FTS projections.
	fromJSON.Tables[1].FTSIndexes = nil
	if !reflect.DeepEqual(built, fromJSON) {
		t.Errorf("builder:\n got %+v\nwant %+v", built, fromJSON)
	}
}

func TestBuilderCompile(t *testing.T) {
	t.Parallel()
	c, err := New(1).
		Table("notes", "id", String("id"), String("user_id"), Bytes("blob").Null()).
		Scope("user:{user_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Variables(); !reflect.DeepEqual(got, []string{"user_id"}) {
		t.Errorf("Variables = %q", got)
	}
	if _, err := New(0).Compile(); err == nil {
		t.Error("Compile of version 0 succeeded")
	}
}

func TestBuilderSchemaIsACopy(t *testing.T) {
	t.Parallel()
	cols := []string{"a"}
	b := New(1).Table("t", "a", String("a")).Scope("x:{a}").Index("t_a", cols...)
	s := b.Schema()
	cols[0] = "changed"
	s.Tables[0].Name = "u"
	if got := b.Schema(); got.Tables[0].Name != "t" || got.Tables[0].Indexes[0].Columns[0] != "a" {
		t.Errorf("builder state changed through its inputs or outputs: %+v", got)
	}
}
