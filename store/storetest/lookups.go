package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// RunLookups tests the operator and engine lookups: ListRows,
// WriteTx.RowsByColumn and LatestScopedChangeSeq.
func RunLookups(t *testing.T, open Opener) {
	runCases(t, open, []testCase{
		{"ListRows", testListRows},
		{"RowsByColumn", testRowsByColumn},
		{"LatestScopedChangeSeq", testLatestScopedChangeSeq},
		{"ReadCommits", testReadCommits},
	})
}

func testReadCommits(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p")
	w1 := Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1)
	w2 := Note{ID: "n1", ProjectID: "p2", TeamID: "x"}.RowWrite(t, 1)
	s1 := AppendCommit(t, e.s, "p", UpsertChange(w1), UpsertChange(w2))
	s2 := e.upsert("p", Task{ID: "t2", ProjectID: "p3"}.RowWrite(t, 1))
	s3 := e.upsert("p", Task{ID: "t3", ProjectID: "p3"}.RowWrite(t, 1))
	got, err := e.s.ReadCommits(e.ctx, "p", 0, s3, 10)
	if err != nil {
		t.Fatal(err)
	}
	if gotSeqs := seqs(got); !slices.Equal(gotSeqs, []int64{s1, s2, s3}) {
		t.Fatalf("ReadCommits = %v, want %v", gotSeqs, []int64{s1, s2, s3})
	}
	if len(got[0].Changes) != 2 || got[0].Changes[0].Table != TableTasks || got[0].Changes[1].Table != TableNotes {
		t.Fatalf("first commit changes = %+v, want both tables in order (unfiltered)", got[0].Changes)
	}
	if !sameChange(got[0].Changes[1], UpsertChange(w2)) {
		t.Fatalf("change = %+v, want %+v", got[0].Changes[1], UpsertChange(w2))
	}
	got, err = e.s.ReadCommits(e.ctx, "p", s1, s3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if gotSeqs := seqs(got); !slices.Equal(gotSeqs, []int64{s2}) {
		t.Fatalf("ReadCommits after %d limit 1 = %v, want [%d]", s1, gotSeqs, s2)
	}
}

func testListRows(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p")
	e.touch("other")
	for _, id := range []string{"b", "a", "d", "c"} {
		e.upsert("p", Task{ID: id, ProjectID: "p" + id}.RowWrite(t, 1))
	}
	e.upsert("other", Task{ID: "z", ProjectID: "p1"}.RowWrite(t, 1))
	all, err := e.s.ListRows(e.ctx, "p", TableTasks, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowIDs(all), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("ListRows = %v, want %v (every scope, row-id order, one partition)", got, want)
	}
	page, err := e.s.ListRows(e.ctx, "p", TableTasks, ptr("b"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowIDs(page), []string{"c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("ListRows after b, limit 2 = %v, want %v", got, want)
	}
	if all[0].ServerVersion != 1 || len(all[0].Payload) == 0 || len(all[0].Scopes) != 1 {
		t.Fatalf("ListRows row = %+v, want version, payload and scopes", all[0])
	}
}

func testRowsByColumn(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p")
	e.upsert("p", Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1))
	e.upsert("p", Task{ID: "t2", ProjectID: "p2"}.RowWrite(t, 1))
	e.upsert("p", Task{ID: "t3", ProjectID: "p1"}.RowWrite(t, 1))
	e.write("p", func(ctx context.Context, tx store.WriteTx) error {
		got, err := tx.RowsByColumn(ctx, TableTasks, "project_id", wire.Value{Str: "p1"}, 10)
		if err != nil {
			return err
		}
		if ids := rowIDs(got); !slices.Equal(ids, []string{"t1", "t3"}) {
			t.Errorf("RowsByColumn(p1) = %v, want [t1 t3]", ids)
		}
		// The transaction's own writes count: a staged delete is gone,
		// a staged insert is there.
		if err := tx.DeleteRow(ctx, TableTasks, "t1"); err != nil {
			return err
		}
		if err := tx.UpsertRow(ctx, Task{ID: "t4", ProjectID: "p1"}.RowWrite(t, 1)); err != nil {
			return err
		}
		got, err = tx.RowsByColumn(ctx, TableTasks, "project_id", wire.Value{Str: "p1"}, 10)
		if err != nil {
			return err
		}
		if ids := rowIDs(got); !slices.Equal(ids, []string{"t3", "t4"}) {
			t.Errorf("RowsByColumn(p1) after staged writes = %v, want [t3 t4]", ids)
		}
		got, err = tx.RowsByColumn(ctx, TableTasks, "project_id", wire.Value{Str: "p1"}, 1)
		if err != nil {
			return err
		}
		if len(got) != 1 {
			t.Errorf("RowsByColumn limit 1 returned %d rows", len(got))
		}
		return nil
	})
}

func testLatestScopedChangeSeq(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.touch("p")
	s1 := e.upsert("p", Task{ID: "t1", ProjectID: "p1"}.RowWrite(t, 1))
	s2 := e.upsert("p", Task{ID: "t2", ProjectID: "p2"}.RowWrite(t, 1))
	e.upsert("p", Note{ID: "n1", ProjectID: "p1", TeamID: "x"}.RowWrite(t, 1))
	tests := []struct {
		values []string
		want   int64
	}{
		{[]string{"p1"}, s1},
		{[]string{"p2"}, s2},
		{[]string{"p1", "p2"}, s2},
		{[]string{"p9"}, 0},
	}
	for _, tt := range tests {
		got, err := e.s.LatestScopedChangeSeq(e.ctx, "p", TableTasks, wire.ScopeValues{Key: VarProject, Values: tt.values})
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("LatestScopedChangeSeq(tasks, %v) = %d, want %d (changes to other tables do not count)", tt.values, got, tt.want)
		}
	}
}
