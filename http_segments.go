package syncgo

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// handleSegment serves GET /segments/{segmentId} (§5.5), re-authorizing
// every download against the X-Syncular-Scopes header.
func (s *Server) handleSegment(w http.ResponseWriter, r *http.Request) {
	const route = "segments"
	if q := r.URL.Query(); q.Has("st") {
		s.handleSignedSegment(w, r, q.Get("st"))
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	noteActor(w, auth.ActorID)
	id := r.PathValue("segmentId")
	requested, err := wire.ParseScopesHeader(r.Header.Get("X-Syncular-Scopes"))
	if err != nil {
		s.writeError(w, route, syncerr.Wrap(syncerr.CodeForbidden, "X-Syncular-Scopes is missing or malformed", err))
		return
	}
	body, err := s.eng.Download(r.Context(), engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, id, requested)
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	h := w.Header()
	etag := `"` + id + `"`
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=0")
	// Added to, not replacing, the Vary: Origin of the CORS layer.
	h.Add("Vary", "Authorization, X-Syncular-Scopes, Accept-Encoding")
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	enc := negotiate(r)
	if enc != "" {
		h.Set("Content-Encoding", enc)
	}
	s.writeSegment(w, id, body, enc)
}

// writeSegment writes a segment's 200 response: with an encoding, the
// compressed body is shared across the downloads of the segment. A body
// stored in the negotiated coding goes out as it is; one in another is
// decoded first. The Content-Encoding header is set by the caller.
func (s *Server) writeSegment(w http.ResponseWriter, id string, seg engine.Body, enc string) {
	if seg.Encoding != "" && seg.Encoding == enc {
		s.writeEncoded(w, seg.Bytes)
		return
	}
	if enc != "" && seg.Encoding != "" {
		// A body kept in another coding (the store's, or the hot
		// segments' zstd) is decoded only when this coding's body is not
		// kept already.
		if b, ok := s.bodies.lookup(id, enc); ok {
			s.writeEncoded(w, b)
			return
		}
	}
	body := seg.Bytes
	if seg.Encoding != "" {
		var err error
		if body, err = store.DecodeSegmentBody(seg.Encoding, seg.Bytes, seg.ByteLength); err != nil {
			w.Header().Del("Content-Encoding")
			s.writeError(w, "segments", err)
			return
		}
	}
	if enc == "" {
		s.writeBody(w, body, enc)
		return
	}
	b, err := s.bodies.body(s.codecs, id, body, enc)
	if err != nil {
		s.writeBody(w, body, enc)
		return
	}
	s.writeEncoded(w, b)
}

// encodeSegment is the engine's EncodeSegment: the zstd body of a
// segment, kept for its downloads (segmentBodies) as a download would have
// compressed it.
func (s *Server) encodeSegment(id string, r io.Reader, size int64) (string, []byte, error) {
	body, err := s.bodies.bodyFrom(s.codecs, id, r, size, store.SegmentBodyZstd)
	return store.SegmentBodyZstd, body, err
}

// writeEncoded writes a 200 response whose body b is already in the
// response's coding.
func (s *Server) writeEncoded(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	if _, err := (&deadlineWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout}).Write(b); err == nil {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		_ = rc.Flush()
	}
}

// writeBody writes a 200 response body in chunks under the write
// deadline, encoded with enc ("" for identity).
func (s *Server) writeBody(w http.ResponseWriter, body []byte, enc string) {
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	out, closeEnc := s.codecs.writer(&deadlineWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout}, enc)
	_, err := out.Write(body)
	if cerr := closeEnc(); err == nil && cerr == nil {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		_ = rc.Flush()
	}
}

// etagMatch reports whether an If-None-Match field (its lines) matches
// etag, a strong entity tag (RFC 9110 §13.1.2): "*" matches, and so does
// any tag of the comma-separated list under the weak comparison (a W/
// prefix ignored).
func etagMatch(fields []string, etag string) bool {
	for _, f := range fields {
		for tag := range strings.SplitSeq(f, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
				return true
			}
		}
	}
	return false
}
