package syncgo_test

import (
	"net/http"
	"testing"

	"github.com/syncgo/syncgo"
)

// A browser page of a listed origin can upload a blob with the default
// methods: PUT /blobs/{blobId} (an Authorization header makes it
// preflighted) is granted like the other routes, not answered without
// Access-Control-Allow-Origin, which the browser takes as a refusal.
func TestCORSPreflightBlobUpload(t *testing.T) {
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) { c.CORS = corsConfig() })
	const origin = "https://app.example.com"
	resp := preflight(t, e.url+"/blobs/sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		origin, "PUT", "authorization,content-type")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != origin ||
		resp.Header.Get("Access-Control-Allow-Methods") != "PUT" {
		t.Errorf("preflight PUT /blobs/…: status %d, Allow-Origin %q, Allow-Methods %q; want 204, %s, PUT",
			resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Access-Control-Allow-Methods"), origin)
	}
}
