package syncgo_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Segments by reference (§5.4, §5.5): a client advertising only external
// rows gets every page as SEGMENT_REF and downloads it with its requested
// scopes; the download is re-authorized each time: other scopes, a missing
// header, a narrowed grant and another partition are refused, and an
// unknown id is sync.not_found.
func TestE2ESegmentsByReference(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		for i := range 30 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("a%02d", i), "p1", "in p1"))
		}
		for i := range 5 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("b%02d", i), "p2", "in p2"))
		}
		syncQuiet(t, w)

		c := e.client("alice", sspclient.Options{Accept: wire.AcceptExternalRows, LimitSnapshotRows: 10})
		mustSubscribe(t, c, "tasks-p1", "p1")
		var refs []wire.SegmentRef
		for _, res := range syncQuiet(t, c) {
			for _, s := range res.Sections {
				if s.Segments != len(s.Refs) {
					t.Fatalf("section %s: %d segments, %d by reference; want every one by reference", s.ID, s.Segments, len(s.Refs))
				}
				refs = append(refs, s.Refs...)
			}
		}
		if len(refs) != 3 {
			t.Fatalf("bootstrap of 30 rows in pages of 10 used %d SEGMENT_REFs, want 3", len(refs))
		}
		server := e.serverRows("tasks")
		for id := range server {
			if id[0] == 'b' {
				delete(server, id)
			}
		}
		sameRows(t, "client vs server (p1)", clientRows(t, c, "tasks"), server)

		ref := refs[0]
		ctx := context.Background()
		p1 := map[string][]string{"project_id": {"p1"}}
		b, err := c.DownloadSegment(ctx, ref.SegmentID, p1)
		if err != nil {
			t.Fatalf("download with the subscription's scopes: %v", err)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != ref.SegmentID || int64(len(b)) != ref.ByteLength {
			t.Fatal("downloaded bytes do not match the descriptor")
		}
		if ref.ScopeDigest != wire.ScopeDigest(p1) {
			t.Fatalf("descriptor scope digest %s, want the digest of %v", ref.ScopeDigest, p1)
		}

		wantHTTPError(t, "other scopes", http.StatusForbidden, syncerr.CodeForbidden,
			dl(c, ref.SegmentID, map[string][]string{"project_id": {"p2"}}))
		wantHTTPError(t, "wider scopes", http.StatusForbidden, syncerr.CodeForbidden,
			dl(c, ref.SegmentID, map[string][]string{"project_id": {"p1", "p2"}}))
		wantHTTPError(t, "unknown id", http.StatusNotFound, syncerr.CodeNotFound,
			dl(c, "sha256:"+hex.EncodeToString(make([]byte, 32)), p1))
		other := e.client("alice@tenant-2", sspclient.Options{})
		wantHTTPError(t, "another partition", http.StatusNotFound, syncerr.CodeNotFound,
			dl(other, ref.SegmentID, p1))

		get := func(hdr map[string]string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, e.url+"/segments/"+ref.SegmentID, nil)
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Accept-Encoding", "identity")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		if resp := get(nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("download without X-Syncular-Scopes: HTTP %d, want 403", resp.StatusCode)
		}
		scopes := string(wire.CanonicalScopeJSON(p1))
		resp := get(map[string]string{"X-Syncular-Scopes": scopes})
		h := resp.Header
		if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != "application/octet-stream" ||
			h.Get("ETag") != `"`+ref.SegmentID+`"` || h.Get("Cache-Control") != "private, max-age=0" ||
			h.Get("Vary") != "Authorization, X-Syncular-Scopes, Accept-Encoding" {
			t.Fatalf("download answered HTTP %d with headers %v; want the §5.5 headers", resp.StatusCode, h)
		}
		if resp := get(map[string]string{"X-Syncular-Scopes": scopes, "If-None-Match": h.Get("ETag")}); resp.StatusCode != http.StatusNotModified {
			t.Fatalf("conditional download: HTTP %d, want 304", resp.StatusCode)
		}
		if resp := get(map[string]string{"X-Syncular-Scopes": `{"project_id":["p2"]}`, "If-None-Match": h.Get("ETag")}); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("conditional download with other scopes: HTTP %d, want 403 before any 304", resp.StatusCode)
		}

		e.allow("alice", map[string][]string{"project_id": {"p2"}})
		wantHTTPError(t, "after the grant moved to p2", http.StatusForbidden, syncerr.CodeForbidden,
			dl(c, ref.SegmentID, p1))
	})
}

// dl downloads a segment and returns the error.
func dl(c *sspclient.Client, id string, scopes map[string][]string) error {
	_, err := c.DownloadSegment(context.Background(), id, scopes)
	return err
}

// wantHTTPError checks that err is an HTTP answer with the status and
// catalog code.
func wantHTTPError(t *testing.T, what string, status int, code string, err error) {
	t.Helper()
	var he *sspclient.HTTPError
	if !errors.As(err, &he) || he.StatusCode != status || he.Code() != code {
		t.Fatalf("%s: got %v; want HTTP %d %s", what, err, status, code)
	}
}

// NeverInline: a client that accepts inline and external rows gets every
// page by reference, even a tiny one; the default inlines it; a client
// that accepts only inline rows still gets them inline.
func TestE2ENeverInline(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, tc := range []struct {
			name   string
			limit  int
			accept uint8
			refs   bool
		}{
			{"default inlines", 0, wire.AcceptInlineRows | wire.AcceptExternalRows, false},
			{"never inline", syncgo.NeverInline, wire.AcceptInlineRows | wire.AcceptExternalRows, true},
			{"never inline, inline-only client", syncgo.NeverInline, wire.AcceptInlineRows, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Limits.InlineSegmentMaxBytes = tc.limit })
				w := e.client("writer", sspclient.Options{})
				mustUpsert(t, w, taskRow("a1", "p1", "one small row"))
				syncQuiet(t, w)
				c := e.client("alice", sspclient.Options{Accept: tc.accept})
				mustSubscribe(t, c, "tasks-p1", "p1")
				segments, refs := 0, 0
				for _, res := range syncQuiet(t, c) {
					for _, s := range res.Sections {
						segments += s.Segments
						refs += len(s.Refs)
					}
				}
				if segments == 0 {
					t.Fatal("bootstrap sent no segment")
				}
				if got := refs == segments; got != tc.refs {
					t.Fatalf("%d of %d segments by reference; want all by reference: %v", refs, segments, tc.refs)
				}
				if refs > 0 && refs != segments {
					t.Fatalf("%d of %d segments by reference; want all or none", refs, segments)
				}
				sameRows(t, "client vs server", clientRows(t, c, "tasks"), e.serverRows("tasks"))
			})
		}
	})
}
