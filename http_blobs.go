package syncgo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
)

// The blob routes (§5.9): PUT <mount>/blobs/{blobId} uploads, verified
// against the content address while the bytes stream into the blob store;
// GET <mount>/blobs/{blobId} downloads, authorized from the rows that
// reference the blob on every request; POST
// <mount>/blobs/{blobId}/upload-grant answers a presigned upload, or that
// the blob is present, or nothing (the client then uses PUT).

// Errors of an upload body.
var (
	errBlobTooLarge = errors.New("the blob is over the size limit")
	errBlobMismatch = errors.New("the bytes do not hash to the blobId")
)

// verifyingReader passes an upload body on while hashing and counting
// it: past max bytes it fails with errBlobTooLarge, and at the end of the
// body it answers errBlobMismatch instead of io.EOF when the bytes do not
// hash to the blob id. A store that gets io.EOF from it got exactly the
// blob's bytes.
type verifyingReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	max  int64
	want string
}

func newVerifyingReader(r io.Reader, blobID string, max int64) *verifyingReader {
	return &verifyingReader{r: r, h: sha256.New(), max: max, want: strings.TrimPrefix(blobID, "sha256:")}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	if v.n > v.max {
		return 0, errBlobTooLarge
	}
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) && hex.EncodeToString(v.h.Sum(nil)) != v.want {
		return n, errBlobMismatch
	}
	return n, err
}

// blobsOff answers a blob route on a server without a blob store.
func blobsOff() *syncerr.Error {
	return syncerr.New(syncerr.CodeBlobNotFound, "this server has no blob store")
}

// maxMediaTypeBytes bounds the advisory media type kept with a blob.
const maxMediaTypeBytes = 255

// uploadMediaType is the advisory media type of an upload: its
// Content-Type, when it parses and is not the default octet stream.
func uploadMediaType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || len(ct) > maxMediaTypeBytes || mt == "application/octet-stream" {
		return ""
	}
	return ct
}

// handleBlobPut serves PUT /blobs/{blobId} (§5.9.3).
func (s *Server) handleBlobPut(w http.ResponseWriter, r *http.Request) {
	const route = "blobs"
	if q := r.URL.Query(); q.Has("st") {
		s.handleSignedBlobPut(w, r, q.Get("st"))
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	s.putBlob(w, r, engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, -1)
}

// putBlob stores an upload body as the blob of the path for auth's
// partition; a granted upload (granted >= 0) may not exceed the granted
// size.
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request, auth engine.Auth, granted int64) {
	const route = "blobs"
	blobs := s.eng.Blobs()
	if blobs == nil {
		s.writeError(w, route, blobsOff())
		return
	}
	id := r.PathValue("blobId")
	if !store.ValidBlobID(id) {
		s.writeError(w, route, syncerr.New(syncerr.CodeBlobHashMismatch, `the blobId is not "sha256:" and 64 lowercase hex digits`))
		return
	}
	limit := s.eng.Limits().MaxBlobBytes
	if granted >= 0 {
		limit = min(limit, granted)
	}
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		s.writeError(w, route, syncerr.New(syncerr.CodeBlobTooLarge, "the blob is over the size limit"))
		return
	}
	rc := http.NewResponseController(w)
	r.Body = &stallBody{r: r.Body, rc: rc, stall: s.cfg.StallTimeout}
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			_ = rc.SetReadDeadline(time.Time{})
			w.Header().Set("Connection", "close")
			s.writeError(w, route, syncerr.Wrap(syncerr.CodeInvalidRequest, "the upload body is not gzip", err))
			return
		}
		defer gz.Close()
		body = gz
	default:
		s.writeError(w, route, &syncerr.Error{Code: syncerr.CodeInvalidRequest, Message: "unsupported upload content encoding",
			HTTPStatus: http.StatusUnsupportedMediaType})
		return
	}
	vr := newVerifyingReader(body, id, limit)
	err := blobs.PutBlob(r.Context(), auth.Partition, id, uploadMediaType(r), vr, s.cfg.Now())
	_ = rc.SetReadDeadline(time.Time{})
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
		return
	case errors.Is(err, errBlobTooLarge):
		err = syncerr.New(syncerr.CodeBlobTooLarge, "the blob is over the size limit")
	case errors.Is(err, errBlobMismatch):
		err = syncerr.New(syncerr.CodeBlobHashMismatch, "the uploaded bytes do not hash to the blobId")
	case r.Context().Err() != nil || isBodyError(err):
		err = syncerr.Wrap(syncerr.CodeInvalidRequest, "the upload body was cut short or stalled; nothing was stored", err)
	}
	w.Header().Set("Connection", "close")
	s.writeError(w, route, err)
}

// isBodyError reports a failure reading a request body (cut short,
// stalled, malformed encoding) rather than a storage failure.
func isBodyError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) ||
		(errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, http.ErrBodyReadAfterClose)
}

// handleBlobGet serves GET /blobs/{blobId} (§5.9.5): an unknown blob is
// blob.not_found; a blob no row the actor may see references is
// blob.forbidden; otherwise the bytes, or with presigned downloads on, a
// signed URL of them.
func (s *Server) handleBlobGet(w http.ResponseWriter, r *http.Request) {
	const route = "blobs"
	if q := r.URL.Query(); q.Has("st") {
		s.handleSignedBlobGet(w, r, q.Get("st"))
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	blobs := s.eng.Blobs()
	if blobs == nil {
		s.writeError(w, route, blobsOff())
		return
	}
	id := r.PathValue("blobId")
	notFound := syncerr.New(syncerr.CodeBlobNotFound, "unknown blob")
	if !store.ValidBlobID(id) {
		s.writeError(w, route, notFound)
		return
	}
	info, err := blobs.StatBlob(r.Context(), auth.Partition, id)
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(w, route, notFound)
		return
	}
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	ea := engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}
	if err := s.eng.AuthorizeBlob(r.Context(), ea, id); err != nil {
		s.writeError(w, route, err)
		return
	}
	h := w.Header()
	etag := `"` + id + `"`
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=0")
	// Added to, not replacing, the Vary: Origin of the CORS layer.
	h.Add("Vary", "Authorization, Accept-Encoding")
	if ps, ok := blobs.(store.BlobPresigner); ok && s.cfg.BlobStorePresignTTL > 0 {
		// The provider enforces its expiry with no skew: announce the
		// instant it was minted for, rounded down to a second.
		ttl := s.cfg.BlobStorePresignTTL
		exp := (s.cfg.Now() + ttl.Milliseconds()) / 1000 * 1000
		u, err := ps.PresignBlobGet(r.Context(), auth.Partition, id, ttl)
		if err != nil {
			s.writeError(w, route, err)
			return
		}
		writeJSONBody(w, map[string]any{"url": u, "urlExpiresAtMs": exp})
		return
	}
	if s.blobPresign.Load() {
		u, exp, err := s.urls.blobURL(id, auth.Partition, s.cfg.Now())
		if err != nil {
			s.writeError(w, route, err)
			return
		}
		writeJSONBody(w, map[string]any{"url": u, "urlExpiresAtMs": exp})
		return
	}
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.streamBlob(w, r, blobs, info)
}

// streamBlob writes a blob's bytes as the response, a chunk at a time
// under the write deadline.
func (s *Server) streamBlob(w http.ResponseWriter, r *http.Request, blobs store.BlobStore, info store.BlobInfo) {
	_, rd, err := blobs.OpenBlob(r.Context(), info.Partition, info.BlobID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = syncerr.New(syncerr.CodeBlobNotFound, "unknown blob")
		}
		s.writeError(w, "blobs", err)
		return
	}
	defer rd.Close()
	h := w.Header()
	ct := info.MediaType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.FormatInt(info.ByteLength, 10))
	// The media type is the uploader's word: a blob must never run as a
	// page of this origin (a browser sending a cookie token).
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	buf := make([]byte, writeChunk)
	if _, err := io.CopyBuffer(&deadlineWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout}, struct{ io.Reader }{rd}, buf); err != nil {
		// The status is sent: the client sees a body shorter than its
		// Content-Length, and the content address fails.
		s.cfg.Logger.Warn("blob download cut short", "blobId", info.BlobID, "err", err)
	}
}

// writeJSONBody answers 200 with a JSON document.
func writeJSONBody(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// errGrantRequest answers an upload-grant request body that is not the
// grant object.
func errGrantRequest() *syncerr.Error {
	return syncerr.New(syncerr.CodeInvalidRequest, `the grant request must be {"byteLength": N, "mediaType"?: "..."}`)
}

// decodeBlobGrant reads an upload-grant request body: one JSON object
// (nothing after it) whose member "byteLength", spelled exactly, is a
// non-negative integer JSON number, and whose "mediaType", when present
// and not null, is a string. Other members are ignored.
func decodeBlobGrant(body []byte) (int64, *syncerr.Error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return 0, errGrantRequest()
	}
	bl, ok := raw["byteLength"]
	if !ok || len(bl) == 0 || (bl[0] != '-' && (bl[0] < '0' || bl[0] > '9')) {
		return 0, errGrantRequest()
	}
	if mt, ok := raw["mediaType"]; ok && string(mt) != "null" {
		var s string
		if len(mt) == 0 || mt[0] != '"' || json.Unmarshal(mt, &s) != nil {
			return 0, errGrantRequest()
		}
	}
	n, err := json.Number(bl).Int64()
	if err != nil || n < 0 {
		return 0, syncerr.New(syncerr.CodeInvalidRequest, "byteLength must be a non-negative integer")
	}
	return n, nil
}

// maxGrantRequestBytes bounds an upload-grant request body.
const maxGrantRequestBytes = 4 << 10

// handleBlobGrant serves POST /blobs/{blobId}/upload-grant (§5.9.3): the
// size cap is enforced on the declared byteLength; with presigned uploads
// on, a blob already stored answers {"present":true} and any other a
// signed PUT URL on this server; with them off, {} (the client uploads
// with PUT).
func (s *Server) handleBlobGrant(w http.ResponseWriter, r *http.Request) {
	const route = "blobs"
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	blobs := s.eng.Blobs()
	if blobs == nil {
		s.writeError(w, route, blobsOff())
		return
	}
	id := r.PathValue("blobId")
	if !store.ValidBlobID(id) {
		s.writeError(w, route, syncerr.New(syncerr.CodeBlobHashMismatch, `the blobId is not "sha256:" and 64 lowercase hex digits`))
		return
	}
	body, releaseBody, err := s.readBody(w, r, maxGrantRequestBytes)
	defer releaseBody()
	if err != nil {
		w.Header().Set("Connection", "close") // net/http would wait for the rest of the body
		s.writeError(w, route, errGrantRequest())
		return
	}
	n, perr := decodeBlobGrant(body)
	if perr != nil {
		s.writeError(w, route, perr)
		return
	}
	if n > s.eng.Limits().MaxBlobBytes {
		s.writeError(w, route, syncerr.New(syncerr.CodeBlobTooLarge, "the blob is over the size limit"))
		return
	}
	if !s.blobPresign.Load() {
		writeJSONBody(w, map[string]any{})
		return
	}
	if info, err := blobs.StatBlob(r.Context(), auth.Partition, id); err == nil {
		// "present" only when a push of this actor could reference the
		// blob; otherwise the client uploads it again (engine.mayReference).
		if ok, err := s.eng.MayReferenceBlob(r.Context(), engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, info); err != nil {
			s.writeError(w, route, err)
			return
		} else if ok {
			writeJSONBody(w, map[string]any{"present": true})
			return
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		s.writeError(w, route, err)
		return
	}
	u, exp, err := s.urls.uploadURL(id, auth.Partition, n, s.cfg.Now())
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	writeJSONBody(w, map[string]any{"url": u, "urlExpiresAtMs": exp})
}
