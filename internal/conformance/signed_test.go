package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// createSigned makes an instance of testSchema with signed URLs and every
// rows segment by reference.
func (h *harness) createSigned(signedURLs map[string]any) (id, mount string) {
	h.t.Helper()
	var out struct{ ID, Mount string }
	body := map[string]any{"schema": json.RawMessage(testSchema), "partition": "part-1", "nowMs": startMs,
		"limits": map[string]any{"inlineSegmentMaxBytes": 0}, "signedUrls": signedURLs}
	if code := h.do("POST", "/__conformance/instances", body, &out); code != http.StatusOK || out.ID == "" {
		h.t.Fatalf("create instance: %d %+v", code, out)
	}
	return out.ID, out.Mount
}

// refs pulls the p1 subscription with an accept mask and returns its
// descriptors.
func (c *sspClient) refs(accept uint8) []*wire.SegmentRef {
	c.t.Helper()
	sub := &wire.Subscription{ID: "tasks", Table: "tasks", Cursor: -1,
		Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}
	var out []*wire.SegmentRef
	for _, f := range c.roundTrip(&wire.Request{Pull: &wire.PullHeader{Accept: accept, LimitSnapshotRows: 2},
		Subscriptions: []*wire.Subscription{sub}}) {
		switch f := f.(type) {
		case *wire.SegmentRef:
			out = append(out, f)
		case *wire.ErrorFrame:
			c.t.Fatalf("pull: ERROR frame %s: %s", f.Code, f.Message)
		}
	}
	return out
}

// The signed-urls capability: descriptors of a pull with accept bit 3
// carry url and urlExpiresAtMs, on the harness's own origin under the
// instance mount, with the st token; the URL serves the bytes with no
// Authorization; setSignedUrlTtlSeconds(0) mints URLs that expire at the
// virtual now; a pull without bit 3 gets no URL; an instance without
// signedUrls mints none.
func TestSignedURLs(t *testing.T) {
	t.Parallel()
	h := startHarness(t)
	id, mount := h.createSigned(map[string]any{"ttlSeconds": 600})
	h.call(id, nil, "setAllowedScopes", "alice", map[string][]string{"project_id": {"p1"}})
	c := h.client(mount, "alice", "client-a")
	c.acquireEpoch()
	if pr := c.push("c1", task("t1", "p1", "one", nil), task("t2", "p1", "two", nil), task("t3", "p1", "three", nil)); pr.Status != wire.PushApplied {
		t.Fatalf("push: %+v", pr)
	}
	refs := c.refs(wire.AcceptExternalRows | wire.AcceptSignedURLs)
	if len(refs) != 2 {
		t.Fatalf("%d descriptors, want 2", len(refs))
	}
	for _, ref := range refs {
		if ref.URL == nil || !strings.HasPrefix(*ref.URL, h.url+mount+"/segments/"+ref.SegmentID+"?st=") ||
			ref.URLExpiresAtMs != (startMs/1000+600)*1000 {
			t.Fatalf("descriptor url %v expiring %d; want the instance's own origin, 600 s from the virtual now", ref.URL, ref.URLExpiresAtMs)
		}
		resp, err := http.Get(*ref.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256(b)
		if resp.StatusCode != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != ref.SegmentID {
			t.Fatalf("GET of the signed URL without Authorization: %d, %d bytes", resp.StatusCode, len(b))
		}
	}
	for _, ref := range c.refs(wire.AcceptExternalRows) {
		if ref.URL != nil {
			t.Fatal("a pull without accept bit 3 got a URL")
		}
	}
	h.call(id, nil, "setSignedUrlTtlSeconds", 0)
	for _, ref := range c.refs(wire.AcceptExternalRows | wire.AcceptSignedURLs) {
		if ref.URL == nil || ref.URLExpiresAtMs > startMs {
			t.Fatalf("with TTL 0: url %v expiring %d; want one expiring at the virtual now %d", ref.URL, ref.URLExpiresAtMs, startMs)
		}
	}

	plain, plainMount := h.createSigned(nil)
	h.call(plain, nil, "setAllowedScopes", "alice", map[string][]string{"project_id": {"p1"}})
	p := h.client(plainMount, "alice", "client-p")
	p.acquireEpoch()
	p.push("c1", task("t1", "p1", "one", nil))
	for _, ref := range p.refs(wire.AcceptExternalRows | wire.AcceptSignedURLs) {
		if ref.URL != nil {
			t.Fatal("an instance without signedUrls minted a URL")
		}
	}
	if code, _ := h.callFails(plain, "setSignedUrlTtlSeconds", 5); code != http.StatusBadRequest {
		t.Fatalf("setSignedUrlTtlSeconds without signedUrls: %d, want 400", code)
	}
}
