package pgstore

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestJSONStringForms: JSONB columns that hold their document as a JSONB
// string (the reference server on Bun's SQL client) read as the object
// form does, through every read of the store: rows (Row, ListRows, a scan
// filtering on two keys in SQL), commit windows, ReadCommits, push results
// (pool and transaction) and client subscriptions.
func TestJSONStringForms(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	w1 := task{id: "t1", project: "p1", owner: "o1", title: ptr("one")}.write(t, c, 1)
	w2 := task{id: "t2", project: "p1", owner: "o2"}.write(t, c, 1)
	seq := apply(t, s, "p", w1, w2)
	rec := store.PushRecord{Status: wire.PushApplied, CommitSeq: seq, RecordedAtMs: 7, Results: []wire.OpResult{
		{OpIndex: 0, Status: wire.OpApplied},
		{OpIndex: 1, Status: wire.OpConflict, Code: "sync.conflict", Message: "m", ServerVersion: 3, ServerRow: []byte{1, 2}},
	}}
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.PutPushResult(ctx, "c1", "cc1", rec)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	client := store.ClientRecord{ClientID: "c1", ActorID: "a1", WireVersion: 3, Cursor: 0, UpdatedAtMs: 5,
		Subscriptions: []store.SubscriptionRecord{{ID: "s1", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}}}}
	if err := s.PutClient(ctx, "p", client); err != nil {
		t.Fatal(err)
	}

	// The reference's form: the JSON text as a JSONB string.
	for _, sql := range []string{
		`UPDATE tasks SET _sync_scopes = to_jsonb(_sync_scopes::text)`,
		`UPDATE sync_changes SET scopes = to_jsonb(scopes::text)`,
		`UPDATE sync_push_results SET result = to_jsonb(result::text)`,
		`UPDATE sync_clients SET subscriptions = to_jsonb(subscriptions::text)`,
	} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryInt(t, s, `SELECT (SELECT count(*) FROM tasks WHERE jsonb_typeof(_sync_scopes) = 'string')
		+ (SELECT count(*) FROM sync_changes WHERE jsonb_typeof(scopes) = 'string')
		+ (SELECT count(*) FROM sync_push_results WHERE jsonb_typeof(result) = 'string')
		+ (SELECT count(*) FROM sync_clients WHERE jsonb_typeof(subscriptions) = 'string')`); n != 6 {
		t.Fatalf("%d JSONB strings; want 6", n)
	}

	r, err := s.Row(ctx, "p", "tasks", "t1")
	if err != nil || !reflect.DeepEqual(r.Scopes, w1.Scopes) {
		t.Errorf("Row = %+v, %v; want scopes %v", r.Scopes, err, w1.Scopes)
	}
	rows, err := s.ListRows(ctx, "p", "tasks", nil, 10)
	if err != nil || len(rows) != 2 || !reflect.DeepEqual(rows[1].Scopes, w2.Scopes) {
		t.Errorf("ListRows = %+v, %v", rows, err)
	}
	// Two keys: the second is checked in SQL on _sync_scopes.
	two := wire.ScopeMap{{Key: "owner_id", Values: []string{"o1"}}, {Key: "project_id", Values: []string{"p1"}}}
	rows, err = s.ScanRows(ctx, "p", store.RowScanQuery{Table: "tasks", Scopes: two, Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].RowID != "t1" {
		t.Errorf("ScanRows(two keys) = %+v, %v; want t1", rows, err)
	}
	win, err := s.ReadCommitWindow(ctx, "p", store.CommitWindowQuery{Table: "tasks", Scopes: two, AfterSeq: 0, ThroughSeq: seq})
	if err != nil || len(win.Commits) != 1 || len(win.Commits[0].Changes) != 1 || win.Commits[0].Changes[0].RowID != "t1" ||
		!reflect.DeepEqual(win.Commits[0].Changes[0].Scopes, w1.Scopes) {
		t.Errorf("ReadCommitWindow = %+v, %v", win, err)
	}
	commits, err := s.ReadCommits(ctx, "p", 0, seq, 10)
	if err != nil || len(commits) != 1 || len(commits[0].Changes) != 2 || !reflect.DeepEqual(commits[0].Changes[1].Scopes, w2.Scopes) {
		t.Errorf("ReadCommits = %+v, %v", commits, err)
	}
	got, err := s.PushResult(ctx, "p", "c1", "cc1")
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("PushResult = %+v, %v; want %+v", got, err, rec)
	}
	err = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		got, err := tx.PushResult(ctx, "c1", "cc1")
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Errorf("tx.PushResult = %+v, %v", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A json column that the reference wrote: a JSONB string of the
	// payload's text, matched by RowsByColumn (a declared reference on a
	// json primary key).
	if _, err := s.pool.Exec(ctx, `UPDATE tasks SET meta = to_jsonb('{"k": [1,2]}'::text) WHERE _sync_row_id = 't2'`); err != nil {
		t.Fatal(err)
	}
	err = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		rows, err := tx.RowsByColumn(ctx, "tasks", "meta", wire.Value{Str: `{"k": [1,2]}`}, 10)
		if err != nil || len(rows) != 1 || rows[0].RowID != "t2" {
			t.Errorf("RowsByColumn(json, string form) = %+v, %v; want t2", rows, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := s.Client(ctx, "p", "c1")
	if err != nil || !reflect.DeepEqual(cl, client) {
		t.Errorf("Client = %+v, %v; want %+v", cl, err, client)
	}
}

func TestJSONText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"a": "b"}`, `{"a": "b"}`},
		{`"{\"a\":\"b\"}"`, `{"a":"b"}`},
		{` "[1]"`, `[1]`},
		{`[]`, `[]`},
	} {
		got, err := jsonText([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("jsonText(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := jsonText([]byte(`"unterminated`)); !errors.Is(err, store.ErrUnreadable) {
		t.Errorf("a broken string: %v", err)
	}
}
