package syncgo_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/internal/urlsign"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

var (
	signKeyA = bytes.Repeat([]byte("signing-key-A..."), 2)
	signKeyB = bytes.Repeat([]byte("signing-key-B..."), 2)
)

// recorder is an http.RoundTripper that records the requests a client
// makes.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path string
	signed, auth bool
}

func (rc *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{method: r.Method, path: r.URL.Path, signed: r.URL.Query().Has("st"),
		auth: r.Header.Get("Authorization") != "" || r.Header.Get("X-Syncular-Scopes") != ""})
	rc.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// segmentFetches counts the signed and the direct segment requests.
func (rc *recorder) segmentFetches(t *testing.T) (signed, direct int) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, r := range rc.reqs {
		if !strings.Contains(r.path, "/segments/") {
			continue
		}
		if r.signed {
			if r.auth {
				t.Fatalf("a signed-URL fetch carried host credentials: %+v", r)
			}
			signed++
		} else {
			direct++
		}
	}
	return signed, direct
}

// clock is a settable server clock.
type clock struct{ ms atomic.Int64 }

func newClock() *clock { c := &clock{}; c.ms.Store(1_750_000_000_000); return c }

func (c *clock) now() int64              { return c.ms.Load() }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// signedEnv is a server with signed URLs on a fresh store of a driver.
type signedEnv struct {
	*e2eEnv
	node  *fleetNode
	clock *clock
}

func newSignedEnv(t *testing.T, d e2eDriver, tweak ...func(*syncgo.Config)) *signedEnv {
	t.Helper()
	e := &e2eEnv{t: t, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}, store: d.open(t)}
	c := newClock()
	n := startNode(t, e, e.store, append([]func(*syncgo.Config){func(cfg *syncgo.Config) {
		cfg.Now = c.now
		cfg.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
		cfg.SignedURLs = &syncgo.SignedURLConfig{Key: signKeyA}
	}}, tweak...)...)
	e.srv, e.url = n.srv, n.http.URL
	return &signedEnv{e2eEnv: e, node: n, clock: c}
}

// seed writes rows of project p1 (and a few of p2) through a client.
func (e *signedEnv) seed(n int) {
	e.t.Helper()
	w := e.client("writer", sspclient.Options{})
	for i := range n {
		mustUpsert(e.t, w, taskRow(fmt.Sprintf("a%03d", i), "p1", "in p1"))
	}
	mustUpsert(e.t, w, taskRow("b000", "p2", "in p2"))
	syncQuiet(e.t, w)
}

// bootstrap runs a client's bootstrap of p1 and returns its descriptors.
func (e *signedEnv) bootstrap(actor string, accept uint8, rec *recorder) (*sspclient.Client, []wire.SegmentRef) {
	e.t.Helper()
	c := e.client(actor, sspclient.Options{Accept: accept, LimitSnapshotRows: 10, Now: e.clock.now,
		HTTPClient: &http.Client{Transport: rec}})
	mustSubscribe(e.t, c, "tasks-p1", "p1")
	var refs []wire.SegmentRef
	for _, res := range syncQuiet(e.t, c) {
		for _, s := range res.Sections {
			refs = append(refs, s.Refs...)
		}
	}
	return c, refs
}

// fetchURL fetches a URL with no credentials and returns the status, the
// catalog code of an error and the body.
func fetchURL(t *testing.T, u string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	code := ""
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotModified {
		code = errorCode(b)
	}
	return resp.StatusCode, code, b
}

func errorCode(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"code":"`))
	if !ok {
		return ""
	}
	code, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(code)
}

func wantRefusal(t *testing.T, what, u string, status int, code string) {
	t.Helper()
	if got, gotCode, body := fetchURL(t, u); got != status || gotCode != code {
		t.Fatalf("%s: HTTP %d %s (%s); want HTTP %d %s", what, got, gotCode, body, status, code)
	}
}

// Signed segment URLs (§5.4): a client that advertises accept bit 3 gets
// url and urlExpiresAtMs on every descriptor and fetches every segment
// from its URL without credentials and without touching the direct
// endpoint; a client without bit 3 gets no URL fields and downloads
// directly; the bytes are the descriptor's.
func TestE2ESignedSegmentURLs(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newSignedEnv(t, d)
		e.seed(35)

		rec := &recorder{}
		c, refs := e.bootstrap("alice", wire.AcceptExternalRows|wire.AcceptSignedURLs, rec)
		if len(refs) != 4 {
			t.Fatalf("%d descriptors, want 4", len(refs))
		}
		for _, ref := range refs {
			if ref.URL == nil || ref.URLExpiresAtMs != (e.clock.now()/1000+900)*1000 {
				t.Fatalf("descriptor %s: url %v, urlExpiresAtMs %d; want a URL expiring in 900 s", ref.SegmentID, ref.URL, ref.URLExpiresAtMs)
			}
			u, err := url.Parse(*ref.URL)
			if err != nil || u.Host != strings.TrimPrefix(e.url, "http://") || u.Path != "/segments/"+ref.SegmentID || !u.Query().Has("st") {
				t.Fatalf("descriptor URL %s is not the server's own /segments/%s?st=...", *ref.URL, ref.SegmentID)
			}
		}
		signed, direct := rec.segmentFetches(t)
		if signed != 4 || direct != 0 {
			t.Fatalf("%d signed-URL fetches and %d direct downloads; want 4 and 0", signed, direct)
		}
		server := e.serverRows("tasks")
		delete(server, "b000")
		sameRows(t, "URL-delivered bootstrap vs server", clientRows(t, c, "tasks"), server)
		status, _, body := fetchURL(t, *refs[0].URL)
		if status != http.StatusOK || sha256Of(body) != refs[0].SegmentID {
			t.Fatalf("fetching a URL again: HTTP %d, %d bytes", status, len(body))
		}

		// No bit 3: no URL fields, the direct endpoint.
		rec2 := &recorder{}
		c2, refs2 := e.bootstrap("bob", wire.AcceptExternalRows, rec2)
		for _, ref := range refs2 {
			if ref.URL != nil || ref.URLExpiresAtMs != 0 {
				t.Fatalf("a client without accept bit 3 got url %v / %d", ref.URL, ref.URLExpiresAtMs)
			}
		}
		signed, direct = rec2.segmentFetches(t)
		if signed != 0 || direct != 4 {
			t.Fatalf("without bit 3: %d signed and %d direct fetches; want 0 and 4", signed, direct)
		}
		sameRows(t, "direct bootstrap", clientRows(t, c2, "tasks"), server)
	})
}

func sha256Of(b []byte) string { return imgSegmentID(b) }

// Hostile signed URLs: an edited payload, an edited MAC, a token of
// another key, a token moved to another segment, and a token without
// claims are sync.forbidden; an expired token sync.segment_expired; a
// genuine token whose audience is another partition, or a partition whose
// log epoch rotated since, sync.not_found; and a segment whose publication
// expired before the URL sync.segment_expired. Credentials change
// nothing: the URL is the grant.
func TestE2ESignedSegmentURLRefusals(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newSignedEnv(t, d, func(c *syncgo.Config) { c.Limits.SegmentTTL = 30 * time.Minute })
		e.seed(25)
		_, refs := e.bootstrap("alice", wire.AcceptExternalRows|wire.AcceptSignedURLs, &recorder{})
		ref := refs[0]
		good := *ref.URL
		base, query, _ := strings.Cut(good, "?st=")
		tok := query
		p64, m64, _ := strings.Cut(tok, ".")
		payload, err := base64.RawURLEncoding.DecodeString(p64)
		if err != nil {
			t.Fatal(err)
		}
		widened := bytes.Replace(payload, []byte(`"exp":`), []byte(`"exp":9`), 1)
		flipped := []byte(m64)
		flipped[0] ^= 0x01
		if flipped[0] == '.' {
			flipped[0] = 'A'
		}
		other := func(k []byte, c urlsign.Claims) string {
			s, err := urlsign.Keys{Current: k}.Sign(c)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		claims := urlsign.Claims{Seg: ref.SegmentID, SD: ref.ScopeDigest, Aud: urlsign.Audience(signKeyA, e2ePartition),
			Exp: e.clock.now()/1000 + 900}

		for _, c := range []struct {
			what, url, code string
			status          int
		}{
			{"an edited payload", base + "?st=" + base64.RawURLEncoding.EncodeToString(widened) + "." + m64, syncerr.CodeForbidden, 403},
			{"an edited MAC", base + "?st=" + p64 + "." + string(flipped), syncerr.CodeForbidden, 403},
			{"a truncated token", base + "?st=" + tok[:len(tok)-5], syncerr.CodeForbidden, 403},
			{"an empty token", base + "?st=", syncerr.CodeForbidden, 403},
			{"a token of another key", base + "?st=" + other(signKeyB, claims), syncerr.CodeForbidden, 403},
			{"a token moved to another segment", strings.Replace(base, ref.SegmentID, refs[1].SegmentID, 1) + "?st=" + tok, syncerr.CodeForbidden, 403},
			{"a blob token on a segment", base + "?st=" + other(signKeyA, urlsign.Claims{Blob: ref.SegmentID, Aud: claims.Aud, Exp: claims.Exp}), syncerr.CodeForbidden, 403},
			{"another scope digest", base + "?st=" + other(signKeyA, urlsign.Claims{Seg: ref.SegmentID, SD: wire.ScopeDigest(map[string][]string{"project_id": {"p2"}}), Aud: claims.Aud, Exp: claims.Exp}), syncerr.CodeForbidden, 403},
			{"a foreign audience", base + "?st=" + other(signKeyA, urlsign.Claims{Seg: ref.SegmentID, SD: ref.ScopeDigest, Aud: urlsign.Audience(signKeyA, "tenant-2"), Exp: claims.Exp}), syncerr.CodeNotFound, 404},
			{"an unknown segment", strings.Replace(base, ref.SegmentID, "sha256:"+strings.Repeat("0", 64), 1) + "?st=" + other(signKeyA, urlsign.Claims{Seg: "sha256:" + strings.Repeat("0", 64), SD: ref.ScopeDigest, Aud: claims.Aud, Exp: claims.Exp}), syncerr.CodeNotFound, 404},
		} {
			wantRefusal(t, c.what, c.url, c.status, c.code)
		}
		// The genuine URL still works, credentials or not.
		if status, _, _ := fetchURL(t, good); status != http.StatusOK {
			t.Fatalf("the genuine URL: HTTP %d", status)
		}

		// Past exp and the 60 s skew: expired.
		e.clock.advance(15*time.Minute + 61*time.Second)
		wantRefusal(t, "an expired URL", good, 404, syncerr.CodeSegmentExpired)
		// A fresh token while the publication has expired (TTL 30 min).
		e.clock.advance(15 * time.Minute)
		fresh := claims
		fresh.Exp = e.clock.now()/1000 + 900
		wantRefusal(t, "a segment whose publication expired", base+"?st="+other(signKeyA, fresh), 404, syncerr.CodeSegmentExpired)

		// A rotated log epoch: the publication is of the old log.
		_, refs = e.bootstrap("carol", wire.AcceptExternalRows|wire.AcceptSignedURLs, &recorder{})
		if err := e.store.RotateLogEpoch(context.Background(), e2ePartition, "epoch-after-restore", e.clock.now()); err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, "a URL of the log before a restore", *refs[0].URL, 404, syncerr.CodeNotFound)
	})
}

// Key rotation: a server that moved to a new key accepts URLs of the
// previous one until PreviousKeyUntil and refuses them after; a process
// of the fleet with the same keys serves URLs another minted.
func TestE2ESignedURLKeyRotation(t *testing.T) {
	forEachFleetDB(t, func(t *testing.T, open func(t *testing.T) store.Store) {
		c := newClock()
		e := &e2eEnv{t: t, schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
		cfg := func(su syncgo.SignedURLConfig) func(*syncgo.Config) {
			return func(cf *syncgo.Config) {
				cf.Now = c.now
				cf.Limits.InlineSegmentMaxBytes = syncgo.NeverInline
				cf.SignedURLs = &su
			}
		}
		a := startNode(t, e, open(t), cfg(syncgo.SignedURLConfig{Key: signKeyA}))
		until := time.UnixMilli(c.now()).Add(20 * time.Minute)
		b := startNode(t, e, open(t), cfg(syncgo.SignedURLConfig{Key: signKeyB, PreviousKey: signKeyA, PreviousKeyUntil: until}))
		e.store, e.url, e.srv = a.store, a.http.URL, a.srv
		se := &signedEnv{e2eEnv: e, node: a, clock: c}
		se.seed(15)
		_, refs := se.bootstrap("alice", wire.AcceptExternalRows|wire.AcceptSignedURLs, &recorder{})
		onB := func(u string) string { return strings.Replace(u, a.http.URL, b.http.URL, 1) }
		for _, ref := range refs {
			if status, _, body := fetchURL(t, onB(*ref.URL)); status != http.StatusOK || sha256Of(body) != ref.SegmentID {
				t.Fatalf("URL minted by A with the previous key, fetched from B: HTTP %d", status)
			}
		}
		// B's own URLs use the new key, which A does not know.
		e.url = b.http.URL
		_, refsB := se.bootstrap("bob", wire.AcceptExternalRows|wire.AcceptSignedURLs, &recorder{})
		if status, _, _ := fetchURL(t, *refsB[0].URL); status != http.StatusOK {
			t.Fatalf("B's URL on B: HTTP %d", status)
		}
		wantRefusal(t, "B's URL on A (a key A never had)", strings.Replace(*refsB[0].URL, b.http.URL, a.http.URL, 1), 403, syncerr.CodeForbidden)
		// After the grace period the previous key is refused (URLs minted
		// later with it would be; this one also expired meanwhile unless
		// the TTL outlives the grace, so mint one that does).
		c.advance(21 * time.Minute)
		late := urlsign.Claims{Seg: refs[0].SegmentID, SD: refs[0].ScopeDigest, Aud: urlsign.Audience(signKeyA, e2ePartition),
			Exp: c.now()/1000 + 600}
		tok, err := urlsign.Keys{Current: signKeyA}.Sign(late)
		if err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, "the previous key after its grace period", b.http.URL+"/segments/"+refs[0].SegmentID+"?st="+tok, 403, syncerr.CodeForbidden)
	})
}
