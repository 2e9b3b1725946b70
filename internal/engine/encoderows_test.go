package engine

import (
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// TestEncodeRowsTrustsStoredContents: a page is encoded from stored rows
// without validating their contents again (a stored string that is not
// UTF-8 is sent as stored: the codec checked it when it was written), but
// a stored row that does not frame as a row of the page's columns (a row
// of a layout with an appended column, as a concurrent migration leaves
// it) still fails the page, so the serve gate can explain it.
func TestEncodeRowsTrustsStoredContents(t *testing.T) {
	cols := []wire.Column{{Name: "id", Type: wire.TypeString}, {Name: "title", Type: wire.TypeString, Nullable: true}}
	l := pageLayout{table: "t", schemaVersion: 2, cols: cols}
	c, err := wire.NewRowCodec(cols, "id")
	if err != nil {
		t.Fatal(err)
	}
	good, err := c.AppendRow(nil, []wire.Value{{Str: "a"}, {Str: "title"}})
	if err != nil {
		t.Fatal(err)
	}
	// Bitmap 0 (both present), "a", then a title of one byte 0xff.
	badUTF8 := []byte{0, 1, 0, 0, 0, 'b', 1, 0, 0, 0, 0xff}
	pg, err := encodeRows(l, []store.Row{{RowID: "a", ServerVersion: 1, Payload: good}, {RowID: "b", ServerVersion: 2, Payload: badUTF8}}, nil)
	if err != nil {
		t.Fatalf("encodeRows re-validated a stored row's contents: %v", err)
	}
	if pg.rowCount != 2 {
		t.Fatalf("rowCount %d, want 2", pg.rowCount)
	}

	wider := append(append([]wire.Column(nil), cols...), wire.Column{Name: "extra", Type: wire.TypeInteger, Nullable: true})
	wc, err := wire.NewRowCodec(wider, "id")
	if err != nil {
		t.Fatal(err)
	}
	for _, extra := range []wire.Value{{Null: true}, {Int: 7}} {
		row, err := wc.AppendRow(nil, []wire.Value{{Str: "c"}, {Null: true}, extra})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := encodeRows(l, []store.Row{{RowID: "a", ServerVersion: 1, Payload: good}, {RowID: "c", ServerVersion: 3, Payload: row}}, nil); err == nil {
			t.Fatalf("encodeRows accepted a row of a wider layout (extra %+v)", extra)
		}
	}
}
