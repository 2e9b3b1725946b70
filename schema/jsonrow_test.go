package schema_test

import (
	"testing"

	"github.com/syncgo/syncgo/internal/schematest"
)

// FuzzJSONRow: any line, never a panic; a line JSONValues accepts is a
// row the table's codec encodes (every value of its column's type), and
// AppendJSON writes it back as a line that imports to the same row.
func FuzzJSONRow(f *testing.F) {
	sc := schematest.Items(f)
	tbl, _ := sc.Table("items")
	f.Add([]byte(`{"id":"a","project_id":"p","n":9007199254740993,"f":1.5,"ok":true,"meta":{"x":[1,"y"]},"raw":"AQI="}`))
	f.Add([]byte(`{"id":"a","n":1.5}`))
	f.Add([]byte(`{"id":null,"raw":"!!"}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, line []byte) {
		values, err := tbl.JSONValues(line)
		if err != nil {
			return
		}
		row, err := tbl.SparseRow(values)
		if err != nil {
			t.Fatalf("JSONValues accepted %q, but its values do not fit: %v", line, err)
		}
		if _, err := tbl.RowCodec().AppendSparse(nil, row); err != nil {
			return // a value the codec refuses (the server would too)
		}
		for i := range row.Values {
			if !row.Present[i] {
				row.Values[i].Null = true // exported as null
			}
		}
		out, err := tbl.AppendJSON(nil, row.Values)
		if err != nil {
			return // a float the JSON cannot carry
		}
		again, err := tbl.JSONValues(out)
		if err != nil {
			t.Fatalf("exported %q does not import: %v", out, err)
		}
		row2, err := tbl.SparseRow(again)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range tbl.Columns() {
			a, b := row.Values[i], row2.Values[i]
			if a.Null != b.Null || (!a.Null && (a.Str != b.Str && c.Name != "meta" || a.Int != b.Int || a.Float != b.Float || a.Bool != b.Bool || string(a.Bytes) != string(b.Bytes))) {
				t.Fatalf("column %s: %+v exported as %q imported as %+v", c.Name, a, out, b)
			}
		}
	})
}
