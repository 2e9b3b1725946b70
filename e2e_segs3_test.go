package syncgo_test

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/blobs3"
	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/s3test"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// With segments in an object store (blobs3.Segments) and delegated
// presign, a client that accepts URLs gets SEGMENT_REFs whose URLs are the
// object store's presigned GETs: it fetches every segment from the object
// store without credentials, never from the sync server's segment route,
// and ends with the server's rows. A client without accept bit 3 still
// downloads from the server. On both drivers.
func TestE2ESegmentStorePresign(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		objects := s3Blobs(t)
		var segs *blobs3.Segments
		e := newSignedEnv(t, d, func(c *syncgo.Config) {
			segs = &blobs3.Segments{Index: c.Store.(store.SegmentStorer).SegmentStore(), Objects: objects}
			c.Segments = segs
			c.SignedURLs = nil
			c.SegmentStorePresignTTL = 10 * time.Minute
		})
		e.seed(35)

		rec := &recorder{}
		c, refs := e.bootstrap("alice", wire.AcceptExternalRows|wire.AcceptSignedURLs, rec)
		if len(refs) != 4 {
			t.Fatalf("%d descriptors, want 4", len(refs))
		}
		server := strings.TrimPrefix(e.url, "http://")
		for _, ref := range refs {
			if ref.URL == nil {
				t.Fatalf("descriptor %s has no URL", ref.SegmentID)
			}
			u, err := url.Parse(*ref.URL)
			if err != nil || u.Host == server || !strings.HasSuffix(u.Path, "/s/"+ref.SegmentID) || !u.Query().Has("X-Amz-Signature") {
				t.Fatalf("descriptor URL %s is not the object store's presigned GET of %s", *ref.URL, ref.SegmentID)
			}
			if want := e.clock.now() + (10 * time.Minute).Milliseconds(); ref.URLExpiresAtMs > want || ref.URLExpiresAtMs < want-1000 {
				t.Fatalf("urlExpiresAtMs %d; want about %d", ref.URLExpiresAtMs, want)
			}
		}
		var fromStore, fromServer int
		rec.mu.Lock()
		for _, r := range rec.reqs {
			switch {
			case strings.Contains(r.path, "/segments/"):
				fromServer++
			case strings.Contains(r.path, "/s/"):
				if r.auth {
					t.Errorf("an object-store fetch carried host credentials: %+v", r)
				}
				fromStore++
			}
		}
		rec.mu.Unlock()
		if fromStore != 4 || fromServer != 0 {
			t.Fatalf("%d object-store fetches and %d server segment requests; want 4 and 0", fromStore, fromServer)
		}
		rows := e.serverRows("tasks")
		delete(rows, "b000")
		sameRows(t, "object-store bootstrap vs server", clientRows(t, c, "tasks"), rows)
		status, _, body := fetchURL(t, *refs[0].URL)
		if status != 200 || sha256Of(body) != refs[0].SegmentID {
			t.Fatalf("fetching a presigned URL without credentials: HTTP %d, %d bytes", status, len(body))
		}

		// No bit 3: no URL, the server's own route (from the index's copy).
		rec2 := &recorder{}
		c2, refs2 := e.bootstrap("bob", wire.AcceptExternalRows, rec2)
		for _, ref := range refs2 {
			if ref.URL != nil {
				t.Fatalf("a client without accept bit 3 got url %v", *ref.URL)
			}
		}
		if _, direct := rec2.segmentFetches(t); direct != 4 {
			t.Fatalf("without bit 3: %d direct fetches; want 4", direct)
		}
		sameRows(t, "direct bootstrap", clientRows(t, c2, "tasks"), rows)
	})
}

// `syncgo serve` with segments.store s3://…: a bootstrap that accepts URLs
// fetches every segment from the object store (the key under the
// configured prefix), none from the server, and gets every row.
func TestBinaryS3Segments(t *testing.T) {
	objects := s3test.Start(t, "segs")
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
	configFile := write("syncgo.yaml", `limits:
  inline_segment_max_bytes: -1
segments:
  store: s3://`+objects.Bucket+`/deploy-2/
blobs:
  s3:
    endpoint: `+objects.URL+`
    region: us-east-1
    access_key_id: `+objects.AccessKey+`
    secret_access_key: `+objects.SecretKey+`
    path_style: true
    presign_ttl: 5m
`)
	p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", configFile, "-db", filepath.Join(dir, "s.db"),
		"-listen", "127.0.0.1:0", "-schema", schemaFile)
	ir, err := schema.ParseJSON([]byte(fleetSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Compile(ir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sspclient.New(p.URL, "writer", sc, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if _, err := w.Upsert("tasks", map[string]any{"id": fmt.Sprintf("t%02d", i), "project_id": "p1", "title": "row"}); err != nil {
			t.Fatal(err)
		}
	}
	syncQuiet(t, w)
	rec := &recorder{}
	r, err := sspclient.New(p.URL, "reader", sc, sspclient.Options{Accept: wire.AcceptExternalRows | wire.AcceptSignedURLs,
		LimitSnapshotRows: 10, HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
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
		t.Fatalf("bootstrap: %d descriptors, %d rows; want 3 and 25", len(refs), len(r.Rows("tasks")))
	}
	for _, ref := range refs {
		if ref.URL == nil || !strings.HasPrefix(*ref.URL, objects.URL+"/"+objects.Bucket+"/deploy-2/s/") {
			t.Fatalf("descriptor URL %v; want the object store's", ref.URL)
		}
	}
	var fromStore, fromServer int
	for _, q := range rec.reqs {
		switch {
		case strings.Contains(q.path, "/segments/"):
			fromServer++
		case strings.Contains(q.path, "/deploy-2/s/"):
			fromStore++
		}
	}
	if fromStore != 3 || fromServer != 0 {
		t.Fatalf("%d object-store fetches, %d server segment requests; want 3 and 0", fromStore, fromServer)
	}
	out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", configFile)
	if code != 0 || !strings.Contains(out, `segment bytes in S3 bucket "`+objects.Bucket+`", prefix "deploy-2/"`) {
		t.Fatalf("config check: exit %d\n%s\n%s", code, out, errOut)
	}
	bad := write("bad.yaml", "segments:\n  store: s3:/nope\n")
	if _, errOut, code := binarytest.Run(t, bin, nil, "config", "check", bad); code == 0 || !strings.Contains(errOut, "segments.store") {
		t.Fatalf("config check of a bad segments.store: exit %d: %s", code, errOut)
	}
}

// Config.SegmentStorePresignTTL needs a presigning segment store and at
// most 15 minutes.
func TestSegmentStorePresignConfig(t *testing.T) {
	e := &e2eEnv{t: t, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
	st := e2eDrivers[0].open(t)
	base := syncgo.Config{Store: st, Schema: e.schema, Authenticate: bearerAuth, ResolveScopes: e.resolve}
	c := base
	c.SegmentStorePresignTTL = time.Minute
	if _, err := syncgo.New(c); err == nil || !strings.Contains(err.Error(), "SegmentPresigner") {
		t.Fatalf("no presigning segment store: %v", err)
	}
	c.Segments = &blobs3.Segments{Index: st.(store.SegmentStorer).SegmentStore(), Objects: s3Blobs(t)}
	c.SegmentStorePresignTTL = 16 * time.Minute
	if _, err := syncgo.New(c); err == nil || !strings.Contains(err.Error(), "15 minutes") {
		t.Fatalf("a 16-minute TTL: %v", err)
	}
}
