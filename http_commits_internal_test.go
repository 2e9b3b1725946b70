package syncgo

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/syncgo/syncgo/internal/schematest"
	"github.com/syncgo/syncgo/wire"
)

// FuzzJSONCommits: any body, never a panic; a body decodeJSONCommits
// accepts holds commits whose upserts are sparse rows of their table's
// codec, named by their primary key, and whose deletes name a row.
func FuzzJSONCommits(f *testing.F) {
	sc := schematest.Items(f)
	f.Add([]byte(`{"clientId":"c","commits":[{"clientCommitId":"1","operations":[{"table":"items","op":"upsert","row":{"id":"a","project_id":"p","n":3,"meta":{"k":[1]},"raw":"AQI="},"baseVersion":2},{"table":"items","op":"delete","rowId":"b"}]}]}`))
	f.Add([]byte(`{"clientId":"c","commits":[{"clientCommitId":"1","operations":[{"table":"items","op":"upsert","rowId":"x","row":{"id":"a"}}]}]}`))
	f.Add([]byte(`{"clientId":"c","commits":[{"clientCommitId":"1","operations":[{"table":"items","op":"delete","rowId":"b","row":{}}]}]} []`))
	f.Add([]byte(`{"clientId":"c","commits":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		commits, clientID, perr := decodeJSONCommits(sc, body, 500)
		if perr != nil {
			if (perr.Code != "sync.invalid_request" && perr.Code != "sync.too_many_operations") || perr.Status() != 400 {
				t.Fatalf("refusal %s (%d)", perr.Code, perr.Status())
			}
			return
		}
		if clientID == "" || len(commits) == 0 {
			t.Fatalf("accepted %q without a client or commits", body)
		}
		tbl, _ := sc.Table("items")
		for _, c := range commits {
			if c.ClientCommitID == "" || len(c.Operations) == 0 {
				t.Fatalf("accepted an empty commit in %q", body)
			}
			for _, o := range c.Operations {
				if o.RowID == "" || (o.BaseVersion != nil && *o.BaseVersion < 0) {
					t.Fatalf("accepted %+v", o)
				}
				if o.Op == wire.OpDelete {
					continue
				}
				row, err := tbl.RowCodec().DecodeSparse(o.Payload)
				if err != nil {
					t.Fatalf("accepted an upsert whose payload does not decode: %v", err)
				}
				if id, err := tbl.SparseRowID(row); err != nil || id != o.RowID {
					t.Fatalf("upsert of %q names %q (%v)", id, o.RowID, err)
				}
			}
		}
	})
}

// POST /commits has its own metrics route and span name.
func TestJSONCommitsRoute(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/commits", nil)
	if rt := classify(r); rt != routeCommits || rt.String() != "commits" || spanRoute(rt, "/commits") != "/commits" {
		t.Fatalf("POST /commits: route %v, span %q", rt, spanRoute(rt, "/commits"))
	}
}
