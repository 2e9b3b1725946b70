package syncgo_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// fleetSchemaJSON has a tasks table and an attachments table with a
// blob_ref column.
const fleetSchemaJSON = `{"version": 1, "tables": [
 {"name": "tasks", "primaryKey": "id", "columns": [
   {"name": "id", "type": "string", "nullable": false},
   {"name": "project_id", "type": "string", "nullable": false},
   {"name": "title", "type": "string", "nullable": false}],
  "scopes": [{"pattern": "project:{project_id}"}]},
 {"name": "attachments", "primaryKey": "id", "columns": [
   {"name": "id", "type": "string", "nullable": false},
   {"name": "project_id", "type": "string", "nullable": false},
   {"name": "file", "type": "blob_ref", "nullable": true}],
  "scopes": [{"pattern": "project:{project_id}"}]}]}`

// Two `syncgo serve` processes on one Postgres, with one signing key and
// the blob store in the database: a bootstrap whose SEGMENT_REFs one
// minted downloads from the other, signed URLs one minted are served by
// the other, a blob uploaded through one is referenced by a push through
// the other and downloads through the first, and a process started after
// the first stopped serves the segments it published.
func TestBinaryFleetSegmentsAndBlobs(t *testing.T) {
	db := pgtest.Schema(t, "syncgo_binfleet", false)
	bin := binarytest.Build(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	schemaFile := write("schema.json", fleetSchemaJSON)
	keyFile := write("url.key", "0123456789abcdef0123456789abcdef\n")
	configFile := write("syncgo.yaml", "limits:\n  inline_segment_max_bytes: -1\n")
	start := func(name string) *binarytest.Process {
		return binarytest.Serve(t, bin, binarytest.Options{Name: name}, "-config", configFile, "-db", db,
			"-listen", "127.0.0.1:0", "-schema", schemaFile, "-signing-key-file", keyFile)
	}
	a, b := start("serve A"), start("serve B")

	ir, err := schema.ParseJSON([]byte(fleetSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Compile(ir)
	if err != nil {
		t.Fatal(err)
	}
	client := func(base, actor string, opts sspclient.Options) *sspclient.Client {
		c, err := sspclient.New(base, actor, sc, opts)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	w := client(a.URL, "writer", sspclient.Options{})
	for i := range 25 {
		if _, err := w.Upsert("tasks", map[string]any{"id": fmt.Sprintf("t%02d", i), "project_id": "p1", "title": "row"}); err != nil {
			t.Fatal(err)
		}
	}
	syncQuiet(t, w)

	// Segments minted by A download from B, directly and by signed URL.
	r := client(a.URL, "reader", sspclient.Options{Accept: wire.AcceptExternalRows | wire.AcceptSignedURLs, LimitSnapshotRows: 10})
	if err := r.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	var refs []wire.SegmentRef
	for _, res := range syncQuiet(t, r) {
		for _, s := range res.Sections {
			refs = append(refs, s.Refs...)
		}
	}
	if len(refs) != 3 || len(r.Rows("tasks")) != 25 {
		t.Fatalf("bootstrap through A: %d descriptors, %d rows; want 3 and 25", len(refs), len(r.Rows("tasks")))
	}
	viaB := client(b.URL, "reader", sspclient.Options{})
	p1 := map[string][]string{"project_id": {"p1"}}
	for _, ref := range refs {
		if ref.URL == nil || !strings.HasPrefix(*ref.URL, a.URL+"/segments/") {
			t.Fatalf("descriptor URL %v; want one on A's origin", ref.URL)
		}
		if _, err := viaB.DownloadSegment(context.Background(), ref.SegmentID, p1); err != nil {
			t.Fatalf("segment minted by A, direct download from B: %v", err)
		}
		if _, err := viaB.FetchSegmentURL(context.Background(), strings.Replace(*ref.URL, a.URL, b.URL, 1), ref.SegmentID); err != nil {
			t.Fatalf("signed URL minted by A, fetched from B: %v", err)
		}
	}

	// A blob uploaded through A, referenced through B, downloaded through A.
	data := bytes.Repeat([]byte("blob across processes "), 30000)
	id := blobOf(data)
	req, _ := http.NewRequest(http.MethodPut, a.URL+"/blobs/"+id, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer writer")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload through A: %v %v", resp, err)
	}
	resp.Body.Close()
	wb := client(b.URL, "writer", sspclient.Options{})
	cid, err := wb.Upsert("attachments", map[string]any{"id": "a1", "project_id": "p1", "file": blobRef(id, len(data))})
	if err != nil {
		t.Fatal(err)
	}
	syncQuiet(t, wb)
	if o, _ := wb.Outcome(cid); o.Status != wire.PushApplied {
		t.Fatalf("push through B referencing the blob: %s", statusOf(o))
	}
	req, _ = http.NewRequest(http.MethodGet, a.URL+"/blobs/"+id, nil)
	req.Header.Set("Authorization", "Bearer reader")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, _ = got.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download through A: HTTP %d, %d bytes", resp.StatusCode, got.Len())
	}

	// A stops; a process started afterwards serves what A published.
	a.Stop()
	c := start("serve C")
	viaC := client(c.URL, "reader", sspclient.Options{})
	for _, ref := range refs {
		if _, err := viaC.DownloadSegment(context.Background(), ref.SegmentID, p1); err != nil {
			t.Fatalf("segment published before A stopped, from C: %v", err)
		}
	}
}
