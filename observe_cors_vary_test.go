package syncgo_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// varyNames lists the field names of a response's Vary headers.
func varyNames(h http.Header) []string {
	var names []string
	for _, v := range h.Values("Vary") {
		for _, n := range strings.Split(v, ",") {
			names = append(names, http.CanonicalHeaderKey(strings.TrimSpace(n)))
		}
	}
	return names
}

// wantCORSDownload checks a download answered to a page of origin: the
// origin allowed by name, and Vary naming Origin beside the fields the
// route itself varies on.
func wantCORSDownload(t *testing.T, what string, a httpAnswer, origin string, alsoVary ...string) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", what, a.status, a.body)
	}
	if got := a.header.Get("Access-Control-Allow-Origin"); got != origin {
		t.Errorf("%s: Access-Control-Allow-Origin %q, want %q", what, got, origin)
	}
	vary := varyNames(a.header)
	for _, n := range append([]string{"Origin"}, alsoVary...) {
		if !slices.Contains(vary, n) {
			t.Errorf("%s: Vary %q lacks %s", what, a.header.Values("Vary"), n)
		}
	}
}

// Downloads of segments and blobs, by the direct endpoints and by signed
// URLs, answer a page of an allowed origin with that origin in
// Access-Control-Allow-Origin, so they must say Vary: Origin as every
// other route does: a cache (the browser's, a proxy's) may otherwise
// hand one origin's answer to a page of another, which the browser then
// refuses. Setting the routes' own Vary (Authorization, Accept-Encoding …)
// used to replace the Origin the CORS layer had put there.
func TestCORSVaryOriginOnDownloads(t *testing.T) {
	const origin = "https://app.example.com"
	withCORS := func(c *syncgo.Config) { c.CORS = corsConfig() }
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newSignedEnv(t, d, withCORS)
		e.seed(35)
		_, refs := e.bootstrap("alice", wire.AcceptExternalRows|wire.AcceptSignedURLs, &recorder{})
		if len(refs) == 0 || refs[0].URL == nil {
			t.Fatalf("no signed segment descriptor: %+v", refs)
		}
		be := &blobEnv{e2eEnv: e.e2eEnv}
		wantCORSDownload(t, "direct segment download", be.do(http.MethodGet, "/segments/"+refs[0].SegmentID, "alice", nil,
			"Origin", origin, "X-Syncular-Scopes", `{"project_id":["p1"]}`, "Accept-Encoding", "gzip, deflate, br, zstd"),
			origin, "Authorization", "X-Syncular-Scopes", "Accept-Encoding")
		wantCORSDownload(t, "signed segment URL", be.do(http.MethodGet, *refs[0].URL, "", nil,
			"Origin", origin, "Accept-Encoding", "gzip, deflate, br, zstd"), origin, "Accept-Encoding")
	})
	for _, k := range blobKinds[:2] {
		t.Run("blobs-"+k.name, func(t *testing.T) {
			e := newBlobEnv(t, k, withCORS, func(c *syncgo.Config) { c.BlobPresign = true })
			e.allow("alice", map[string][]string{"project_id": {"p1"}})
			data := []byte("a browser's attachment")
			id := blobOf(data)
			wantAnswer(t, "upload", e.put("alice", data, id, "Origin", origin), 200, "")
			alice := e.client("alice", sspclient.Options{})
			if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
				t.Fatalf("push referencing the blob: %s", statusOf(o))
			}
			a := e.do(http.MethodGet, "/blobs/"+id, "alice", nil, "Origin", origin)
			wantCORSDownload(t, "blob download (signed URL answer)", a, origin, "Authorization")
			var dl struct {
				URL string `json:"url"`
			}
			if err := json.Unmarshal(a.body, &dl); err != nil || dl.URL == "" {
				t.Fatalf("blob download answered %s, want a signed URL", a.body)
			}
			wantCORSDownload(t, "signed blob URL", e.do(http.MethodGet, dl.URL, "", nil, "Origin", origin), origin)
		})
		t.Run("blobs-inline-"+k.name, func(t *testing.T) {
			e := newBlobEnv(t, k, withCORS)
			e.allow("alice", map[string][]string{"project_id": {"p1"}})
			data := []byte("inline bytes")
			id := blobOf(data)
			wantAnswer(t, "upload", e.put("alice", data, id, "Origin", origin), 200, "")
			alice := e.client("alice", sspclient.Options{})
			if o := e.attach(alice, "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
				t.Fatalf("push referencing the blob: %s", statusOf(o))
			}
			wantCORSDownload(t, "blob download (bytes)", e.do(http.MethodGet, "/blobs/"+id, "alice", nil, "Origin", origin),
				origin, "Authorization", "Accept-Encoding")
		})
	}
}
