package syncgo_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/blobs3"
	"github.com/syncgo/syncgo/internal/s3test"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// s3Blobs is a blob store in a bucket of the test's own in an
// S3-compatible server (internal/s3test: a real one under CI).
func s3Blobs(t *testing.T) *blobs3.Store {
	t.Helper()
	srv := s3test.Start(t, "blobs")
	s, err := blobs3.Open(blobs3.Options{Endpoint: srv.Endpoint, Insecure: true, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true, Bucket: srv.Bucket, Prefix: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With delegated presign, an authorized download answers the object
// store's presigned GET (the bytes never pass through the sync server),
// which yields the bytes without any authentication; an unauthorized
// one gets no URL.
func TestE2EBlobStorePresign(t *testing.T) {
	for _, k := range blobKinds {
		if !k.s3 {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			e := newBlobEnv(t, k, func(c *syncgo.Config) { c.BlobStorePresignTTL = 10 * time.Minute })
			data := bytes.Repeat([]byte("object store bytes "), 5000)
			id := blobOf(data)
			wantAnswer(t, "upload", e.put("alice", data, id), 200, "")
			if o := e.attach(e.client("alice", sspclient.Options{}), "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
				t.Fatal(statusOf(o))
			}
			a := e.get("alice", id)
			var dl struct {
				URL            string `json:"url"`
				URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
			}
			if a.status != 200 || json.Unmarshal(a.body, &dl) != nil || strings.HasPrefix(dl.URL, e.url) ||
				!strings.Contains(dl.URL, strings.TrimPrefix(id, "sha256:")) || !strings.Contains(dl.URL, "X-Amz-Signature=") {
				t.Fatalf("delegated presigned download: %d %s", a.status, a.body)
			}
			if want := e.clock.now() + (10 * time.Minute).Milliseconds(); dl.URLExpiresAtMs > want || dl.URLExpiresAtMs < want-1000 {
				t.Fatalf("urlExpiresAtMs %d; want about %d", dl.URLExpiresAtMs, want)
			}
			resp, err := http.Get(dl.URL)
			if err != nil {
				t.Fatal(err)
			}
			got := new(bytes.Buffer)
			_, _ = got.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("GET of the presigned URL: %d, %d bytes", resp.StatusCode, got.Len())
			}
			e.allow("mallory", map[string][]string{"project_id": {"p2"}})
			wantAnswer(t, "another scope gets no URL", e.get("mallory", id), 403, "blob.forbidden")
		})
	}
}

// A blob store that cannot presign is refused with delegated presign on.
func TestBlobStorePresignNeedsPresigner(t *testing.T) {
	e := &e2eEnv{t: t, schema: blobSchema(t), allowed: map[string]map[string][]string{}, store: e2eDrivers[0].open(t)}
	_, err := syncgo.New(syncgo.Config{Store: e.store, Schema: e.schema, Blobs: e.store.(store.BlobStorer).BlobStore(),
		BlobStorePresignTTL: time.Minute, ResolveScopes: e.resolve, Authenticate: bearerAuth})
	if err == nil || !strings.Contains(err.Error(), "BlobPresigner") {
		t.Fatalf("New with a database blob store and BlobStorePresignTTL: %v", err)
	}
}
