package conformance

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/syncgo/syncgo/crdt/yjs"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// crdtSchema is the catalog's crdt table; its crdt column names no
// crdtType, which the driver reads as yjs-doc.
const crdtSchema = `{"version": 1, "tables": [{"name": "notes", "primaryKey": "id",
  "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "project_id", "type": "string", "nullable": false},
    {"name": "title", "type": "string", "nullable": false},
    {"name": "doc", "type": "crdt", "nullable": true}],
  "scopes": [{"pattern": "project:{project_id}"}]}]}`

// The crdt capability end to end: two clients push Yjs updates to one
// row's crdt column through an instance mount, and readRows shows the
// merge of both, whichever came first.
func TestCRDTColumnsMerge(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		ups := fixtureUpdates(t)
		var out struct{ ID, Mount string }
		if code := h.do("POST", "/__conformance/instances",
			map[string]any{"schema": json.RawMessage(crdtSchema), "partition": "part-1", "nowMs": startMs}, &out); code != http.StatusOK {
			t.Fatalf("create: %d", code)
		}
		h.call(out.ID, nil, "setAllowedScopes", "a", map[string][]string{"project_id": {"p1"}})
		h.call(out.ID, nil, "setAllowedScopes", "b", map[string][]string{"project_id": {"p1"}})
		ir, err := schema.ParseJSON([]byte(crdtSchema))
		if err != nil {
			t.Fatal(err)
		}
		ir.Tables[0].Columns[3].CRDTType = schema.CRDTYjsDoc
		sc, err := schema.Compile(ir)
		if err != nil {
			t.Fatal(err)
		}
		notes, _ := sc.Table("notes")
		row := func(doc []byte) wire.Operation {
			payload, err := notes.RowCodec().AppendSparse(nil, wire.SparseRow{Present: []bool{true, true, true, true},
				Values: []wire.Value{{Str: "n1"}, {Str: "p1"}, {Str: "t"}, {Bytes: doc}}})
			if err != nil {
				t.Fatal(err)
			}
			return wire.Operation{Table: "notes", RowID: "n1", Op: wire.OpUpsert, Payload: payload}
		}
		for i, c := range []*sspClient{h.client(out.Mount, "a", "client-a"), h.client(out.Mount, "b", "client-b")} {
			c.acquireEpoch()
			for _, f := range c.roundTrip(&wire.Request{Commits: []*wire.PushCommit{{ClientCommitID: "c1",
				Operations: []wire.Operation{row(ups[i])}}}}) {
				if pr, ok := f.(*wire.PushResult); ok && pr.Status != wire.PushApplied {
					t.Fatalf("push %d: %+v", i, pr)
				}
			}
		}
		var rows []struct {
			Version int64
			Values  struct {
				Doc struct {
					Bytes string `json:"$bytes"`
				}
			}
		}
		h.call(out.ID, &rows, "readRows", "notes")
		want, err := yjs.Merger{}.MergeUpdates(ups[0], ups[1])
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Version != 2 || rows[0].Values.Doc.Bytes != hex.EncodeToString(want) {
			t.Fatalf("readRows = %+v, want n1 at version 2 with the merged doc %x", rows, want)
		}
	})
}

// fixtureUpdates returns two real Yjs updates of the equivalence fixtures.
func fixtureUpdates(t *testing.T) [][]byte {
	t.Helper()
	f, err := os.Open("../../crdt/yjs/testdata/equivalence.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var fx struct{ Inputs [][]byte }
		if err := json.Unmarshal(sc.Bytes(), &fx); err != nil {
			t.Fatal(err)
		}
		if len(fx.Inputs) >= 2 && len(fx.Inputs[0]) > 2 && len(fx.Inputs[1]) > 2 {
			return fx.Inputs
		}
	}
	t.Fatal("no fixture with two updates")
	return nil
}
