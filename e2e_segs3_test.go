package syncgo_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/blobs3"
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
		objects := fakeS3Blobs(t)
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
