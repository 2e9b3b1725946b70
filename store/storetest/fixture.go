package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The tables of the fixture schema.
const (
	// TableTasks is tasks(id string PK, project_id string, title string
	// null, n integer null, blob bytes null), scoped "project:{project_id}".
	TableTasks = "tasks"
	// TableNotes is notes(id string PK, project_id string, team_id string,
	// body string null), scoped "project:{project_id}" and "team:{team_id}".
	TableNotes = "notes"
)

// The scope variables of the fixture schema.
const (
	VarProject = "project_id"
	VarTeam    = "team_id"
)

func taskColumns() []schema.Column {
	return []schema.Column{
		schema.String("id"),
		schema.String(VarProject),
		schema.String("title").Null(),
		schema.Integer("n").Null(),
		schema.Bytes("blob").Null(),
	}
}

func noteColumns() []schema.Column {
	return []schema.Column{
		schema.String("id"),
		schema.String(VarProject),
		schema.String(VarTeam),
		schema.String("body").Null(),
	}
}

// buildSchema compiles a schema of the given version with tasks of the
// given columns and, when notes is set, the notes table.
func buildSchema(version int32, tasks []schema.Column, notes bool) (*schema.Compiled, error) {
	b := schema.New(version).Table(TableTasks, "id", tasks...).Scope("project:{project_id}")
	if notes {
		b = b.Table(TableNotes, "id", noteColumns()...).Scope("project:{project_id}").Scope("team:{team_id}")
	}
	return b.Compile()
}

var fixture = sync.OnceValues(func() (*schema.Compiled, error) {
	return buildSchema(1, taskColumns(), true)
})

// FixtureSchema returns the suite's schema: version 1 with the tables
// [TableTasks] and [TableNotes].
func FixtureSchema(tb testing.TB) *schema.Compiled {
	tb.Helper()
	c, err := fixture()
	if err != nil {
		tb.Fatalf("compile fixture schema: %v", err)
	}
	return c
}

// Task is a row of [TableTasks]. Nil fields are NULL.
type Task struct {
	ID        string
	ProjectID string
	Title     *string
	N         *int64
	Blob      []byte
}

// Values returns the task's values in row-codec order.
func (r Task) Values() []wire.Value {
	v := []wire.Value{{Str: r.ID}, {Str: r.ProjectID}, {Null: true}, {Null: true}, {Null: true}}
	if r.Title != nil {
		v[2] = wire.Value{Str: *r.Title}
	}
	if r.N != nil {
		v[3] = wire.Value{Int: *r.N}
	}
	if r.Blob != nil {
		v[4] = wire.Value{Bytes: r.Blob}
	}
	return v
}

// RowWrite returns the write of the task at a server version.
func (r Task) RowWrite(tb testing.TB, version int64) store.RowWrite {
	tb.Helper()
	return NewRowWrite(tb, FixtureSchema(tb), TableTasks, r.Values(), version)
}

// Note is a row of [TableNotes]. A nil Body is NULL.
type Note struct {
	ID        string
	ProjectID string
	TeamID    string
	Body      *string
}

// Values returns the note's values in row-codec order.
func (r Note) Values() []wire.Value {
	v := []wire.Value{{Str: r.ID}, {Str: r.ProjectID}, {Str: r.TeamID}, {Null: true}}
	if r.Body != nil {
		v[3] = wire.Value{Str: *r.Body}
	}
	return v
}

// RowWrite returns the write of the note at a server version.
func (r Note) RowWrite(tb testing.TB, version int64) store.RowWrite {
	tb.Helper()
	return NewRowWrite(tb, FixtureSchema(tb), TableNotes, r.Values(), version)
}

// NewRowWrite builds the write of a row of a table of c: the payload in
// the table's full-row codec, the stored scopes in canonical key order,
// and Values set. The row has no column versions.
func NewRowWrite(tb testing.TB, c *schema.Compiled, table string, values []wire.Value, version int64) store.RowWrite {
	tb.Helper()
	w, err := newRowWrite(c, table, values, version)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func newRowWrite(c *schema.Compiled, table string, values []wire.Value, version int64) (store.RowWrite, error) {
	t, ok := c.Table(table)
	if !ok {
		return store.RowWrite{}, fmt.Errorf("row write: no table %q", table)
	}
	payload, err := t.RowCodec().AppendRow(nil, values)
	if err != nil {
		return store.RowWrite{}, fmt.Errorf("row write: encode %s row: %w", table, err)
	}
	id, ok := t.RowID(values)
	if !ok {
		return store.RowWrite{}, fmt.Errorf("row write: %s row has no id", table)
	}
	scopes, err := t.StoredScopes(values)
	if err != nil {
		return store.RowWrite{}, fmt.Errorf("row write: %w", err)
	}
	return store.RowWrite{
		Row: store.Row{
			Table:         table,
			RowID:         id,
			ServerVersion: version,
			Scopes:        store.ScopesFromMap(scopes.Map()),
			Payload:       payload,
		},
		Values: values,
	}, nil
}

// UpsertChange returns the log change of an upsert of w.
func UpsertChange(w store.RowWrite) store.Change {
	return store.Change{
		Table:      w.Table,
		RowID:      w.RowID,
		Op:         wire.OpUpsert,
		RowVersion: w.ServerVersion,
		Scopes:     w.Scopes,
		Payload:    w.Payload,
	}
}

// DeleteChange returns the log change of a delete of r: the scopes of the
// row before removal, no version and no payload.
func DeleteChange(r store.Row) store.Change {
	return store.Change{Table: r.Table, RowID: r.RowID, Op: wire.OpDelete, Scopes: r.Scopes}
}

var commitIDs atomic.Int64

// newCommit returns a commit of the changes with a fresh client commit id.
func newCommit(changes ...store.Change) store.NewCommit {
	n := commitIDs.Add(1)
	return store.NewCommit{
		ClientID:       "client-1",
		ClientCommitID: fmt.Sprintf("commit-%d", n),
		ActorID:        "actor-1",
		CreatedAtMs:    1_000_000 + n,
		Changes:        changes,
	}
}

// AppendCommit appends a commit of the changes to the partition's log in
// its own Write, without touching rows, and returns its sequence.
func AppendCommit(tb testing.TB, s store.Store, partition string, changes ...store.Change) int64 {
	tb.Helper()
	var seq int64
	err := s.Write(tb.Context(), partition, func(ctx context.Context, tx store.WriteTx) error {
		var err error
		seq, err = tx.AppendCommit(ctx, newCommit(changes...))
		return err
	})
	if err != nil {
		tb.Fatalf("append commit to %q: %v", partition, err)
	}
	return seq
}

// ApplyUpsert writes the row and appends the one-change commit of its
// upsert in one Write, and returns the commit's sequence.
func ApplyUpsert(tb testing.TB, s store.Store, partition string, w store.RowWrite) int64 {
	tb.Helper()
	var seq int64
	err := s.Write(tb.Context(), partition, func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		var err error
		seq, err = tx.AppendCommit(ctx, newCommit(UpsertChange(w)))
		return err
	})
	if err != nil {
		tb.Fatalf("upsert %s/%s in %q: %v", w.Table, w.RowID, partition, err)
	}
	return seq
}
