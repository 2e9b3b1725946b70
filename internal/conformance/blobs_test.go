package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// blobSchema is the catalog's attachments table: a blob_ref column scoped
// by project.
const blobSchema = `{"version": 1, "tables": [{"name": "attachments", "primaryKey": "id",
  "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "project_id", "type": "string", "nullable": false},
    {"name": "file", "type": "blob_ref", "nullable": true}],
  "scopes": [{"pattern": "project:{project_id}"}]}]}`

// rawDo sends a request to the harness with an optional actor and returns
// the status, the body and the Content-Type.
func (h *harness) rawDo(method, url, actor string, body []byte, header ...string) (int, []byte, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if actor != "" {
		req.Header.Set("Authorization", "Bearer "+actor)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get("Content-Type")
}

func blobOf(s string) ([]byte, string) {
	b := []byte(s)
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

// The blobs and blob-presign capabilities over the instance mount: upload,
// a push referencing the blob, download by an actor of the scope and
// refusal for one of another scope; then with setBlobPresign(true) the
// download answers a URL on the harness's origin served without
// Authorization, and an upload grant answers a PUT URL, then present.
func TestBlobs(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		var out struct{ ID, Mount string }
		body := map[string]any{"schema": json.RawMessage(blobSchema), "partition": "part-1", "nowMs": startMs}
		if code := h.do("POST", "/__conformance/instances", body, &out); code != http.StatusOK {
			t.Fatalf("create: %d", code)
		}
		id, base := out.ID, h.url+out.Mount
		h.call(id, nil, "setAllowedScopes", "owner", map[string][]string{"project_id": {"p1"}})
		h.call(id, nil, "setAllowedScopes", "intruder", map[string][]string{"project_id": {"p2"}})

		data, blobID := blobOf("attached bytes")
		if code, b, _ := h.rawDo("PUT", base+"/blobs/"+blobID, "owner", []byte("other bytes")); code != http.StatusBadRequest || !strings.Contains(string(b), "blob.hash_mismatch") {
			t.Fatalf("mismatching upload: %d %s", code, b)
		}
		if code, b, _ := h.rawDo("PUT", base+"/blobs/"+blobID, "owner", data, "Content-Type", "text/plain"); code != http.StatusOK {
			t.Fatalf("upload: %d %s", code, b)
		}
		ir, _ := schema.ParseJSON([]byte(blobSchema))
		sc, err := schema.Compile(ir)
		if err != nil {
			t.Fatal(err)
		}
		tbl, _ := sc.Table("attachments")
		c := &sspClient{t: t, url: base, actor: "owner", clientID: "client-o", codec: tbl.RowCodec()}
		c.acquireEpoch()
		ref := `{"blobId":"` + blobID + `","byteLength":14}`
		payload, err := c.codec.AppendSparse(nil, wire.SparseRow{Present: []bool{true, true, true},
			Values: []wire.Value{{Str: "a1"}, {Str: "p1"}, {Str: ref}}})
		if err != nil {
			t.Fatal(err)
		}
		var pr *wire.PushResult
		for _, f := range c.roundTrip(&wire.Request{Commits: []*wire.PushCommit{{ClientCommitID: "c1",
			Operations: []wire.Operation{{Table: "attachments", RowID: "a1", Op: wire.OpUpsert, Payload: payload}}}}}) {
			if p, ok := f.(*wire.PushResult); ok {
				pr = p
			}
		}
		if pr == nil || pr.Status != wire.PushApplied {
			t.Fatalf("push referencing the blob: %+v", pr)
		}
		if code, b, ct := h.rawDo("GET", base+"/blobs/"+blobID, "owner", nil); code != http.StatusOK || !bytes.Equal(b, data) || ct != "text/plain" {
			t.Fatalf("download by the owner: %d %q %s", code, b, ct)
		}
		if code, b, _ := h.rawDo("GET", base+"/blobs/"+blobID, "intruder", nil); code != http.StatusForbidden || !strings.Contains(string(b), "blob.forbidden") {
			t.Fatalf("download by another scope: %d %s", code, b)
		}
		var grant map[string]any
		_, b, _ := h.rawDo("POST", base+"/blobs/"+blobID+"/upload-grant", "owner", []byte(`{"byteLength":14}`))
		if err := json.Unmarshal(b, &grant); err != nil || len(grant) != 0 {
			t.Fatalf("grant without presign: %s; want {}", b)
		}

		h.call(id, nil, "setBlobPresign", true)
		code, b, ct := h.rawDo("GET", base+"/blobs/"+blobID, "owner", nil)
		var dl struct {
			URL            string `json:"url"`
			URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
		}
		if code != http.StatusOK || !strings.HasPrefix(ct, "application/json") || json.Unmarshal(b, &dl) != nil ||
			!strings.HasPrefix(dl.URL, base+"/blobs/"+blobID+"?st=") || dl.URLExpiresAtMs != (startMs/1000+900)*1000 {
			t.Fatalf("presigned download: %d %s %s", code, ct, b)
		}
		if code, got, _ := h.rawDo("GET", dl.URL, "", nil); code != http.StatusOK || !bytes.Equal(got, data) {
			t.Fatalf("GET of the presigned URL without Authorization: %d %q", code, got)
		}
		if code, _, _ := h.rawDo("GET", base+"/blobs/"+blobID, "intruder", nil); code != http.StatusForbidden {
			t.Fatalf("presigned download by another scope: %d; want 403 before any URL", code)
		}

		more, moreID := blobOf("granted bytes")
		var up struct {
			URL     string `json:"url"`
			Present bool   `json:"present"`
		}
		_, b, _ = h.rawDo("POST", base+"/blobs/"+moreID+"/upload-grant", "owner", []byte(`{"byteLength":13,"mediaType":"text/plain"}`))
		if json.Unmarshal(b, &up) != nil || !strings.HasPrefix(up.URL, base+"/blobs/"+moreID+"?st=") {
			t.Fatalf("upload grant: %s", b)
		}
		if code, b, _ := h.rawDo("PUT", up.URL, "", more); code != http.StatusOK {
			t.Fatalf("PUT to the granted URL: %d %s", code, b)
		}
		up.URL = ""
		_, b, _ = h.rawDo("POST", base+"/blobs/"+moreID+"/upload-grant", "owner", []byte(`{"byteLength":13}`))
		if json.Unmarshal(b, &up) != nil || !up.Present || up.URL != "" {
			t.Fatalf("grant of a stored blob: %s; want present", b)
		}
		if code, b, _ := h.rawDo("POST", base+"/blobs/"+moreID+"/upload-grant", "owner", []byte(`{"byteLength":999999999999}`)); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "blob.too_large") {
			t.Fatalf("grant over the cap: %d %s", code, b)
		}
	})
}
