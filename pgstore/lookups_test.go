package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

func TestListRowsAndLatestScopedChange(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	ids := []string{"b", "B", "é", "a", "Z", "10", "9"}
	for i, id := range ids {
		apply(t, s, "p", task{id: id, project: fmt.Sprint("p", i%3), owner: "o"}.write(t, c, 1))
	}
	apply(t, s, "other", task{id: "x", project: "p0", owner: "o"}.write(t, c, 1))
	var got []string
	var after *string
	for {
		page, err := s.ListRows(ctx, "p", "tasks", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, r.RowID)
		}
		if len(page) < 2 {
			break
		}
		after = &page[len(page)-1].RowID
	}
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Errorf("ListRows: %q; want %q", got, want)
	}
	for _, tc := range []struct {
		values []string
		want   int64
	}{
		{[]string{"p0"}, 7}, {[]string{"p1"}, 5}, {[]string{"p1", "p2"}, 6}, {[]string{"none"}, 0}, {nil, 0},
	} {
		seq, err := s.LatestScopedChangeSeq(ctx, "p", "tasks", wire.ScopeValues{Key: "project_id", Values: tc.values})
		if seq != tc.want || err != nil {
			t.Errorf("LatestScopedChangeSeq(%q) = %d, %v; want %d", tc.values, seq, err, tc.want)
		}
	}
}

func TestRowsByColumn(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	for _, id := range []string{"b", "a", "C"} {
		apply(t, s, "p", task{id: id, project: "p", owner: "o", rank: ptr[int64](7)}.write(t, c, 1))
	}
	apply(t, s, "q", task{id: "x", project: "p", owner: "o", rank: ptr[int64](7)}.write(t, c, 1))
	err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, task{id: "d", project: "p", owner: "o", rank: ptr[int64](7)}.write(t, c, 1)); err != nil {
			return err
		}
		if err := tx.DeleteRow(ctx, "tasks", "b"); err != nil {
			return err
		}
		rows, err := tx.RowsByColumn(ctx, "tasks", "rank", wire.Value{Int: 7}, 10)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.RowID)
		}
		if err != nil || !slices.Equal(ids, []string{"C", "a", "d"}) {
			t.Errorf("RowsByColumn = %q, %v", ids, err)
		}
		if rows, err := tx.RowsByColumn(ctx, "tasks", "rank", wire.Value{Int: 7}, 1); len(rows) != 1 || err != nil {
			t.Errorf("RowsByColumn limit 1 = %d rows, %v", len(rows), err)
		}
		if rows, err := tx.RowsByColumn(ctx, "tasks", "rank", wire.Value{Null: true}, 10); len(rows) != 0 || err != nil {
			t.Errorf("RowsByColumn(NULL) = %d rows, %v", len(rows), err)
		}
		if _, err := tx.RowsByColumn(ctx, "tasks", "nope", wire.Value{Int: 7}, 10); err == nil {
			t.Error("RowsByColumn of an unknown column succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
