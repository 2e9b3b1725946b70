package syncgo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/internal/urlsign"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
)

// SignedURLConfig configures the signed URLs of the server's own origin
// (§5.4): segment descriptors carry a short-lived URL, with the native
// HMAC token of the spec in its st parameter, for clients that advertise
// accept bit 3; the URL is served by the same Handler without any
// authentication (the token is the whole grant). Blob downloads and
// upload grants use the same keys (§5.9).
type SignedURLConfig struct {
	// Key signs the URLs (HMAC-SHA256): at least 16 bytes, 32 random
	// bytes recommended. Every process of a fleet must have the same key.
	Key []byte
	// PreviousKey is a key being rotated out: tokens it signed are still
	// accepted until PreviousKeyUntil, which should be at least the
	// rotation time plus TTL. New tokens are signed with Key only.
	PreviousKey      []byte
	PreviousKeyUntil time.Time
	// BaseURL is the absolute URL Handler is mounted at, as clients reach
	// it, for example "https://sync.example.com/api/sync": the URLs are
	// minted under it (BaseURL + "/segments/{segmentId}?st=...").
	BaseURL string
	// TTL is how long a minted URL is valid, in whole seconds. Default 15
	// minutes, the spec's upper bound; the revocation window of issued
	// URLs equals it. Server.SetSignedURLTTL changes it at run time.
	TTL time.Duration
	// NoSegmentURLs mints no segment URLs: the keys then serve only
	// presigned blob transfers (Config.BlobPresign).
	NoSegmentURLs bool
}

// urlSigner mints and verifies the server's signed URLs.
type urlSigner struct {
	keys urlsign.Keys
	base string
	ttl  atomic.Int64 // seconds
}

func newURLSigner(c *SignedURLConfig) (*urlSigner, error) {
	keys := urlsign.Keys{Current: c.Key, Previous: c.PreviousKey}
	if c.PreviousKey != nil {
		keys.PreviousUntilMs = c.PreviousKeyUntil.UnixMilli()
	}
	if err := keys.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("SignedURLs.BaseURL %q is not an absolute http(s) URL without query", c.BaseURL)
	}
	s := &urlSigner{keys: keys, base: strings.TrimSuffix(c.BaseURL, "/")}
	ttl := c.TTL
	if ttl == 0 {
		ttl = 15 * time.Minute
	}
	if ttl < 0 {
		return nil, errors.New("SignedURLs.TTL is negative")
	}
	s.ttl.Store(int64(ttl / time.Second))
	return s, nil
}

// SegmentURL implements engine.URLIssuer.
func (s *urlSigner) SegmentURL(segmentID, partition, scopeDigest string, nowMs int64) (string, int64, error) {
	exp := nowMs/1000 + s.ttl.Load()
	tok, err := s.keys.Sign(urlsign.Claims{Seg: segmentID, SD: scopeDigest,
		Aud: urlsign.Audience(s.keys.Current, partition), Exp: exp})
	if err != nil {
		return "", 0, err
	}
	return s.base + "/segments/" + url.PathEscape(segmentID) + "?st=" + tok, exp * 1000, nil
}

// segmentPresignIssuer is the engine.URLIssuer of delegated presign
// (§5.4): the segment store's own URL of the bytes.
type segmentPresignIssuer struct {
	p   store.SegmentPresigner
	ttl time.Duration
}

// SegmentURL implements engine.URLIssuer. The URL's lifetime is counted
// from the wall clock the object store checks it by, so its expiry is
// reported from nowMs minus a second of margin.
func (i segmentPresignIssuer) SegmentURL(segmentID, _, _ string, nowMs int64) (string, int64, error) {
	u, err := i.p.PresignSegmentGet(context.Background(), segmentID, i.ttl)
	if err != nil {
		return "", 0, err
	}
	return u, nowMs + i.ttl.Milliseconds() - 1000, nil
}

// SetSignedURLTTL changes the lifetime of the signed URLs minted from now
// on (whole seconds; 0 mints URLs that are already expired, which clients
// never fetch). It does nothing on a server without signed URLs.
func (s *Server) SetSignedURLTTL(ttl time.Duration) {
	if s.urls != nil && ttl >= 0 {
		s.urls.ttl.Store(int64(ttl / time.Second))
	}
}

// handleSignedSegment serves GET /segments/{segmentId}?st=<token> without
// authentication: the token is the grant (§5.4). A token that does not
// verify, or that names another segment, is sync.forbidden; an expired
// one sync.segment_expired (the client re-pulls); one whose audience
// reaches no publication of the segment sync.not_found.
func (s *Server) handleSignedSegment(w http.ResponseWriter, r *http.Request, token string) {
	const route = "segments"
	id := r.PathValue("segmentId")
	if s.urls == nil {
		s.writeError(w, route, syncerr.New(syncerr.CodeForbidden, "signed URLs are not enabled"))
		return
	}
	c, key, err := s.urls.keys.Verify(token, s.cfg.Now())
	switch {
	case errors.Is(err, urlsign.ErrExpired) && c.Kind() == urlsign.KindSegment && c.Seg == id:
		s.writeError(w, route, syncerr.New(syncerr.CodeSegmentExpired, "the signed URL has expired; pull again"))
		return
	case err != nil || c.Kind() != urlsign.KindSegment || c.Seg != id:
		s.writeError(w, route, syncerr.New(syncerr.CodeForbidden, "the signed URL does not grant this segment"))
		return
	}
	body, derr := s.eng.DownloadSigned(r.Context(), id, c.Aud, c.SD, func(partition string) string {
		return urlsign.Audience(key, partition)
	})
	if derr != nil {
		s.writeError(w, route, derr)
		return
	}
	h := w.Header()
	etag := `"` + id + `"`
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=0")
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	// This server is the serving hop of its own URLs: it compresses per
	// response, as the direct endpoint does (§5.8: the stored bytes stay
	// uncompressed; a CDN in front would do the same at its edge).
	// Added to, not replacing, the Vary: Origin of the CORS layer.
	h.Add("Vary", "Accept-Encoding")
	enc := negotiate(r)
	if enc != "" {
		h.Set("Content-Encoding", enc)
	}
	s.writeSegment(w, id, body, enc)
}

// blobURL mints the signed download URL of a blob after its download was
// authorized (§5.9.5): {"v":1,"blob","aud","exp"}, aud naming the
// partition to this host alone.
func (s *urlSigner) blobURL(blobID, partition string, nowMs int64) (string, int64, error) {
	exp := nowMs/1000 + s.ttl.Load()
	tok, err := s.keys.Sign(urlsign.Claims{Blob: blobID, Aud: urlsign.SealPartition(s.keys.Current, partition), Exp: exp})
	if err != nil {
		return "", 0, err
	}
	return s.base + "/blobs/" + url.PathEscape(blobID) + "?st=" + tok, exp * 1000, nil
}

// uploadURL mints the signed PUT URL of an upload grant (§5.9.3): the
// native form of a presigned single PUT, bound to the blob, its
// partition and the granted size.
func (s *urlSigner) uploadURL(blobID, partition string, byteLength int64, nowMs int64) (string, int64, error) {
	exp := nowMs/1000 + s.ttl.Load()
	tok, err := s.keys.Sign(urlsign.Claims{Put: blobID, Len: &byteLength,
		Aud: urlsign.SealPartition(s.keys.Current, partition), Exp: exp})
	if err != nil {
		return "", 0, err
	}
	return s.base + "/blobs/" + url.PathEscape(blobID) + "?st=" + tok, exp * 1000, nil
}

// SetBlobPresign turns presigned blob transfers on or off (see
// Config.BlobPresign). It does nothing on a server without signed URLs.
func (s *Server) SetBlobPresign(on bool) {
	s.blobPresign.Store(on && s.urls != nil)
}

// blobToken verifies a blob token of kind k for the path's blob and
// returns the partition it names; a token that does not verify, is of
// another kind or blob, or has expired is blob.forbidden (a download
// recovers by asking the authorized endpoint again).
func (s *Server) blobToken(r *http.Request, token string, k urlsign.Kind) (string, *syncerr.Error) {
	forbidden := syncerr.New(syncerr.CodeBlobForbidden, "the signed URL does not grant this blob")
	if s.urls == nil {
		return "", forbidden
	}
	c, key, err := s.urls.keys.Verify(token, s.cfg.Now())
	id := r.PathValue("blobId")
	if err != nil || c.Kind() != k || (k == urlsign.KindBlob && c.Blob != id) || (k == urlsign.KindUpload && c.Put != id) {
		return "", forbidden
	}
	partition, ok := urlsign.OpenPartition(key, c.Aud)
	if !ok {
		return "", forbidden
	}
	return partition, nil
}

// handleSignedBlobGet serves GET /blobs/{blobId}?st=<token> without
// authentication: the token was minted after the download was authorized.
func (s *Server) handleSignedBlobGet(w http.ResponseWriter, r *http.Request, token string) {
	const route = "blobs"
	partition, serr := s.blobToken(r, token, urlsign.KindBlob)
	if serr != nil {
		s.writeError(w, route, serr)
		return
	}
	blobs := s.eng.Blobs()
	if blobs == nil {
		s.writeError(w, route, blobsOff())
		return
	}
	info, err := blobs.StatBlob(r.Context(), partition, r.PathValue("blobId"))
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(w, route, syncerr.New(syncerr.CodeBlobNotFound, "unknown blob"))
		return
	}
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	h := w.Header()
	etag := `"` + info.BlobID + `"`
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=0")
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.streamBlob(w, r, blobs, info)
}

// handleSignedBlobPut serves PUT /blobs/{blobId}?st=<token> without
// authentication: an upload grant, for exactly the granted size.
func (s *Server) handleSignedBlobPut(w http.ResponseWriter, r *http.Request, token string) {
	partition, serr := s.blobToken(r, token, urlsign.KindUpload)
	if serr != nil {
		s.writeError(w, "blobs", serr)
		return
	}
	c, _, _ := s.urls.keys.Verify(token, s.cfg.Now())
	s.putBlob(w, r, engine.Auth{Partition: partition}, *c.Len)
}
