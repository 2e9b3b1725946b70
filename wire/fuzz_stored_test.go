package wire

import (
	"bytes"
	"testing"
)

// FuzzStoredRow: the framing-only paths for stored rows (DecodeStoredRow,
// SegmentWriter.WriteStoredRow) never panic, answer a protocol error for
// what they refuse, accept every row the full decoder accepts (with the
// same values), and agree with each other: a row one takes the other
// takes, and the segment bytes are WriteRow's wherever WriteRow accepts.
func FuzzStoredRow(f *testing.F) {
	c := mustCodec(f, testColumns(), "id")
	h := SegmentHeader{Table: "t", SchemaVersion: 1, Columns: testColumns()}
	addRowSeeds(f, c)
	f.Fuzz(func(t *testing.T, b []byte) {
		stored := make([]Value, len(testColumns()))
		serr := c.DecodeStoredRow(stored, b)
		if serr != nil && ErrorCode(serr) != CodeInvalidRequest {
			t.Fatalf("non-protocol error %v", serr)
		}
		full, ferr := c.DecodeRow(b)
		if ferr == nil && serr != nil {
			t.Fatalf("the full decoder takes the row, the stored one refuses it: %v", serr)
		}
		if ferr == nil {
			enc, err := c.AppendRow(nil, stored)
			if err != nil || !bytes.Equal(enc, b) {
				t.Fatalf("stored decode differs from the full one: %v (%x, want %x; full %v)", err, enc, b, full)
			}
		}
		var viaStored, viaFull bytes.Buffer
		ws, err := NewSegmentWriter(&viaStored, h)
		if err != nil {
			t.Fatal(err)
		}
		werr := ws.WriteStoredRow(1, b)
		if (werr == nil) != (serr == nil) {
			t.Fatalf("WriteStoredRow %v, DecodeStoredRow %v: they disagree", werr, serr)
		}
		if ferr != nil || werr != nil {
			return
		}
		wf, err := NewSegmentWriter(&viaFull, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := wf.WriteRow(1, b); err != nil {
			t.Fatalf("WriteRow refuses a row DecodeRow takes: %v", err)
		}
		if err := ws.Close(); err != nil {
			t.Fatal(err)
		}
		if err := wf.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(viaStored.Bytes(), viaFull.Bytes()) {
			t.Fatal("WriteStoredRow's segment differs from WriteRow's")
		}
	})
}
