package sqliteimage_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/syncgo/syncgo/internal/sqliteimage"
)

// Whatever bytes ReadRows reads, it refuses them as invalid or returns
// rows that agree with Inspect's count, hold values of their columns'
// types in strictly increasing key order with versions ≥ 1, and build an
// image that reads back the same rows.
func FuzzReadRows(f *testing.F) {
	ctx := context.Background()
	img, err := sqliteimage.Build(ctx, f.TempDir(), testMeta, allTypes, 0, batches(allTypesRows(), 2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(img)
	f.Add(mutate(f, img, `UPDATE things SET n = 'x' WHERE id = 'a'`))
	f.Add(mutate(f, img, `UPDATE things SET _syncular_version = 0 WHERE id = 'b'`))
	f.Add(mutate(f, img, `DELETE FROM things WHERE id = 'c'`, `UPDATE _syncular_segment SET rowCount = 5`))
	f.Add(img[:len(img)/2])
	f.Fuzz(func(t *testing.T, image []byte) {
		rows, err := sqliteimage.ReadRows(ctx, image, allTypes, 0)
		if err != nil {
			if !errors.Is(err, sqliteimage.ErrInvalid) {
				t.Fatalf("ReadRows failed with %v, not an ErrInvalid", err)
			}
			return
		}
		_, _, count, err := sqliteimage.Inspect(ctx, image)
		if err != nil || count != int64(len(rows)) {
			t.Fatalf("ReadRows read %d rows; Inspect: %d rows, %v", len(rows), count, err)
		}
		for i, r := range rows {
			if r.ServerVersion < 1 || len(r.Values) != len(allTypes) {
				t.Fatalf("row %d: version %d, %d values", i, r.ServerVersion, len(r.Values))
			}
			for c, v := range r.Values {
				if v.Null && !allTypes[c].Nullable {
					t.Fatalf("row %d: NULL in %s", i, allTypes[c].Name)
				}
			}
			if i > 0 && rows[i-1].Values[0].Str >= r.Values[0].Str {
				t.Fatalf("row %d: key %q after %q", i, r.Values[0].Str, rows[i-1].Values[0].Str)
			}
		}
		again, err := sqliteimage.Build(ctx, t.TempDir(), testMeta, allTypes, 0, batches(rows, 2))
		if errors.Is(err, sqliteimage.ErrUnrepresentable) {
			return
		}
		if err != nil {
			t.Fatalf("the rows read do not build an image: %v", err)
		}
		back, err := sqliteimage.ReadRows(ctx, again, allTypes, 0)
		if err != nil || !reflect.DeepEqual(back, rows) {
			t.Fatalf("rebuilt image reads back %v, %v; want the rows read", back, err)
		}
	})
}
