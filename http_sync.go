package syncgo

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// errBodyTooLarge marks a body over MaxRequestBytes.
var errBodyTooLarge = errors.New("request body too large")

// limitedReader fails with errBodyTooLarge past n bytes instead of
// truncating, so an oversized body is never mistaken for a truncated one.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Probe for one more byte. The probe's own failure is kept: the
		// compressed-size cap (http.MaxBytesReader) reports an oversized
		// body exactly here, and reading it as EOF would answer a 413
		// case as a truncated message (400).
		// io.ReadFull: a Read that returns no byte and no error (which
		// io.Reader allows) is not the end of the body.
		var one [1]byte
		n, err := io.ReadFull(l.r, one[:])
		switch {
		case n > 0:
			return 0, errBodyTooLarge
		case errors.Is(err, io.EOF):
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func (s *Server) handleSync(w http.ResponseWriter, r *http.Request) {
	const route = "sync"
	if !s.mediaTypeIs(w, r, route, ProtocolContentType, syncerr.CodeInvalidRequest) {
		return
	}
	auth, ok := s.admitCaller(w, r, route)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	// Deadlines set here are per request: cleared before the connection
	// goes back to keep-alive (and before serving, for the read side: a
	// read deadline that fires while the handler runs would cancel the
	// request's context).
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	r.Body = &stallBody{r: r.Body, rc: rc, stall: s.cfg.StallTimeout}
	req, counted, perr := s.readRequest(r)
	defer counted.release()
	_ = rc.SetReadDeadline(time.Time{})
	if perr == nil {
		noteOp(w, requestOp(req))
	}
	if perr != nil {
		// The rest of a body that failed (oversized, stalled, malformed)
		// is not wanted: close the connection instead of letting net/http
		// drain up to 256 KiB more of it, without a deadline, before
		// answering.
		if counted.refused {
			s.refuseBodyMemory(w, route)
			return
		}
		w.Header().Set("Connection", "close")
		s.writeError(w, route, perr)
		return
	}
	release, refusal := s.admit.acquire(r.Context())
	if refusal != nil {
		if syncerr.As(refusal) != nil {
			w.Header().Set("Retry-After", s.admit.retryAfter())
			s.writeError(w, route, refusal)
		}
		return // otherwise the client went away while queued
	}
	defer release()
	enc, identityRefused := negotiateAll(r)
	resp := &httpResponder{s: s, w: w, rc: rc, encoding: enc, release: release, compressSmall: identityRefused}
	err := s.eng.Serve(r.Context(), engine.Auth{ActorID: auth.ActorID, Partition: auth.Partition}, req, resp)
	if resp.started {
		if cerr := resp.finish(); cerr != nil && err == nil {
			err = cerr
		}
		if err != nil && syncerr.As(err) == nil {
			s.reportFailure(route, "sync response failed", err)
		}
		return
	}
	if err != nil {
		s.writeError(w, route, err)
	}
}

// admitCaller authenticates a request and applies the rate limits
// (Config.RateLimit); on a refusal it writes the error and reports false.
func (s *Server) admitCaller(w http.ResponseWriter, r *http.Request, route string) (Auth, bool) {
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return auth, false
	}
	noteActor(w, auth.ActorID)
	if refusal, wait := s.rates.allow(auth.Partition, auth.ActorID); refusal != nil {
		w.Header().Set("Retry-After", retryAfterSeconds(wait))
		s.writeError(w, route, refusal)
		return auth, false
	}
	return auth, true
}

// readRequest reads and decodes the body: gzip request bodies are
// accepted (§1.3), and the decompressed size is capped, so a compression
// bomb costs at most MaxRequestBytes.
//
// The decompressed bytes are counted against MaxBodyMemory until the
// request calls counted.release (counted is never nil); counted.refused
// marks a body refused for want of room.
func (s *Server) readRequest(r *http.Request) (_ *wire.Request, counted *countedBody, _ *syncerr.Error) {
	decoded, gz, perr := decodedBody(r, http.MaxBytesReader(nil, r.Body, s.cfg.MaxRequestBytes), s.cfg.MaxRequestBytes)
	counted = s.bodyMem.reader(decoded)
	if perr != nil {
		return nil, counted, perr
	}
	if gz != nil {
		defer gz.Close()
	}
	body := io.Reader(counted)
	opts := wire.DecoderOptions{MaxFrameBytes: s.cfg.MaxFrameBytes}
	if n := r.ContentLength; n >= 0 && n <= smallRequest && r.Header.Get("Content-Encoding") == "" {
		// A small body (a push+pull round's) is read whole and decoded
		// in place: no 32 KiB read buffer per request.
		b := make([]byte, 0, n+1)
		for {
			m, err := body.Read(b[len(b):cap(b)])
			b = b[:len(b)+m]
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, counted, badBody(err)
			}
			if len(b) == cap(b) { // longer than announced
				return nil, counted, badBody(io.ErrUnexpectedEOF)
			}
		}
		req, err := wire.DecodeRequest(b, opts)
		if err != nil {
			return nil, counted, badBody(err)
		}
		return req, counted, nil
	}
	req, err := wire.ReadRequest(body, opts)
	if err != nil {
		return nil, counted, badBody(err)
	}
	return req, counted, nil
}

// decodedBody is a request body decoded from its Content-Encoding (gzip
// is accepted, §1.3; another coding is a 415) and capped at max bytes
// decompressed (more is errBodyTooLarge), so that a compression bomb
// costs at most max. gz, when not nil, is the decompressor to close.
func decodedBody(r *http.Request, body io.Reader, max int64) (_ io.Reader, gz io.Closer, _ *syncerr.Error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, nil, badBody(err)
		}
		return &limitedReader{r: zr, n: max}, zr, nil
	default:
		return nil, nil, &syncerr.Error{Code: syncerr.CodeInvalidRequest, Message: "unsupported request content encoding",
			HTTPStatus: http.StatusUnsupportedMediaType}
	}
	return &limitedReader{r: body, n: max}, nil, nil
}

// smallRequest is the largest announced body read whole before decoding.
const smallRequest = 16 << 10

func badBody(err error) *syncerr.Error {
	if pe := syncerr.As(err); pe != nil {
		return pe // already a protocol error (an unsupported coding)
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTooLarge), errors.As(err, &mbe), errors.Is(err, wire.ErrFrameTooLarge):
		return &syncerr.Error{Code: syncerr.CodeInvalidRequest, Message: "request body too large",
			HTTPStatus: http.StatusRequestEntityTooLarge, Err: err}
	}
	if code := wire.ErrorCode(err); code != "" {
		return syncerr.Wrap(code, "the request is not a valid SSP2 message", err)
	}
	return syncerr.Wrap(syncerr.CodeInvalidRequest, "the request body could not be read", err)
}

// httpResponder starts the HTTP response when the engine begins writing.
type httpResponder struct {
	s        *Server
	w        http.ResponseWriter
	rc       *http.ResponseController
	encoding string
	// compressSmall: the client refused identity, so even a small
	// response is compressed.
	compressSmall bool
	started       bool
	closeEnc      func() error
	lz            *lazyEncoder // the response's compressor, when it may compress
	held          *heldWriter
	// release frees the request's admission slot (idempotent): before
	// the response's last bytes go out, so that a client that sends its
	// next request as soon as it has the whole response finds the slot
	// free.
	release func()
}

// Begin implements engine.Responder.
func (h *httpResponder) Begin(version uint16) (*wire.Encoder, error) {
	w, err := h.BeginStream(version)
	if err != nil {
		return nil, err
	}
	return wire.NewEncoder(w, wire.KindResponse, version)
}

// BeginStream implements engine.StreamResponder: the engine calls it when
// the first verified chunk of the response is released, so a serve-gate
// refusal found before that is still answered as HTTP 503.
func (h *httpResponder) BeginStream(uint16) (io.Writer, error) {
	dw := h.startBody()
	if h.encoding == "" {
		h.closeEnc = func() error { return nil }
		return &flushWriter{w: dw, rw: h.w}, nil
	}
	lz := &lazyEncoder{h: h, dw: dw}
	h.lz, h.closeEnc = lz, lz.close
	if h.compressSmall {
		lz.start()
	}
	return &flushWriter{w: lz, rw: h.w}, nil
}

// smallResponse is the largest /sync response body (uncompressed) that
// goes out without a Content-Encoding although the client accepts one: it
// fits one packet either way, and compressing it costs both sides more
// than the bytes it saves (a push result, a round's own commit, an empty
// pull). Identity is always an acceptable coding unless the client
// refuses it (negotiate).
const smallResponse = 1400

// lazyEncoder holds a response's first smallResponse bytes and starts the
// negotiated compressor only when the response outgrows them; a response
// that ends first is sent as it is.
type lazyEncoder struct {
	h   *httpResponder
	dw  io.Writer
	buf []byte
	out io.Writer // the compressor, once started
	end func() error
}

// flush passes on what the encoder holds through the compressor, which
// starts now if it did not yet: a response flushed before its end (a
// bootstrap's segment descriptors) is compressed whatever its size.
func (l *lazyEncoder) flush() error {
	if l.out == nil {
		if err := l.compress(); err != nil {
			return err
		}
	}
	if f, ok := l.out.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

func (l *lazyEncoder) Write(p []byte) (int, error) {
	if l.out != nil {
		return l.out.Write(p)
	}
	if len(l.buf)+len(p) <= smallResponse {
		if l.buf == nil {
			// Most responses reach here in one Write (the encoder's
			// flush at its end): a buffer of their size, not of the most.
			l.buf = make([]byte, 0, max(len(p), 256))
		}
		l.buf = append(l.buf, p...)
		return len(p), nil
	}
	if err := l.compress(); err != nil {
		return 0, err
	}
	return l.out.Write(p)
}

// compress starts the compressor and passes it what buf holds.
func (l *lazyEncoder) compress() error {
	l.start()
	if len(l.buf) > 0 {
		if _, err := l.out.Write(l.buf); err != nil {
			return err
		}
	}
	l.buf = nil
	return nil
}

// start starts the compressor. The status line is not written yet:
// heldWriter holds the compressed bytes until the end or 16 KiB.
func (l *lazyEncoder) start() {
	l.h.w.Header().Set("Content-Encoding", l.h.encoding)
	l.out, l.end = l.h.s.codecs.writer(l.dw, l.h.encoding)
}

func (l *lazyEncoder) close() error {
	if l.out != nil {
		return l.end()
	}
	_, err := l.dw.Write(l.buf)
	l.buf = nil
	return err
}

// BodyEncoding implements engine.BodyResponder: a body compressed ahead
// is sent in the negotiated coding (compressBody refuses a body that
// would go out uncompressed).
func (h *httpResponder) BodyEncoding() string { return h.encoding }

// BeginEncoded implements engine.BodyResponder: the body written is
// already in the negotiated coding and goes out as it is, held like a
// compressed response (sent whole with its length up to heldResponse).
func (h *httpResponder) BeginEncoded(uint16) (io.Writer, error) {
	if h.encoding == "" {
		return nil, errors.New("syncgo: a coded body for a response without a coding")
	}
	h.w.Header().Set("Content-Encoding", h.encoding)
	h.closeEnc = func() error { return nil }
	return h.startBody(), nil
}

// startBody sets a /sync response's headers and returns the writer of its
// body as sent (after any coding): held up to heldResponse, each write
// under the write timeout.
func (h *httpResponder) startBody() *deadlineWriter {
	hd := h.w.Header()
	hd.Set("Content-Type", ProtocolContentType)
	hd.Set("Cache-Control", "no-store")
	hd.Add("Vary", "Accept-Encoding")
	h.started = true
	h.held = &heldWriter{w: h.w}
	return &deadlineWriter{w: h.held, rc: h.rc, timeout: h.s.cfg.WriteTimeout}
}

var (
	_ engine.BodyResponder = (*httpResponder)(nil)
	_ engine.Flusher       = (*httpResponder)(nil)
)

// Flush implements engine.Flusher: the status line and what the response
// holds go out now, and the rest of the response streams (chunked).
func (h *httpResponder) Flush() error {
	if h.held == nil {
		return nil // nothing started
	}
	if h.lz != nil {
		if err := h.lz.flush(); err != nil {
			return err
		}
	}
	_ = h.rc.SetWriteDeadline(time.Now().Add(h.s.cfg.WriteTimeout))
	if err := h.held.release(); err != nil {
		return err
	}
	return h.rc.Flush()
}

func (h *httpResponder) finish() error {
	err := h.closeEnc()
	if h.release != nil {
		h.release()
	}
	_ = h.rc.SetWriteDeadline(time.Now().Add(h.s.cfg.WriteTimeout))
	if herr := h.held.end(); herr != nil && err == nil {
		err = herr
	}
	if ferr := h.rc.Flush(); ferr != nil && err == nil && !errors.Is(ferr, http.ErrNotSupported) {
		err = ferr
	}
	return err
}

// heldResponse is the size up to which a response body (as sent, after
// compression) is held back whole and sent with a Content-Length in one
// write; a larger one streams, chunked, from the moment it passes it. A
// push+pull round's response is a few hundred bytes: held, it costs one
// write (headers and body) instead of three (headers, the body's chunk
// and the closing chunk).
const heldResponse = 16 << 10

// heldWriter holds a response's first heldResponse bytes before the
// status line is written.
type heldWriter struct {
	w    http.ResponseWriter
	buf  []byte
	open bool // the status line is written: bytes go through
}

func (h *heldWriter) Write(p []byte) (int, error) {
	if h.open {
		return h.w.Write(p)
	}
	if len(h.buf)+len(p) <= heldResponse {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	if err := h.release(); err != nil {
		return 0, err
	}
	return h.w.Write(p)
}

// release writes the status line and what is held: the rest of the
// response streams.
func (h *heldWriter) release() error {
	if h.open {
		return nil
	}
	h.open = true
	h.w.WriteHeader(http.StatusOK)
	if len(h.buf) == 0 {
		return nil
	}
	_, err := h.w.Write(h.buf)
	h.buf = nil
	return err
}

// end sends a held response whole, with its length.
func (h *heldWriter) end() error {
	if h.open {
		return nil
	}
	h.open = true
	h.w.Header().Set("Content-Length", strconv.Itoa(len(h.buf)))
	h.w.WriteHeader(http.StatusOK)
	_, err := h.w.Write(h.buf)
	h.buf = nil
	return err
}

// readBody reads a whole request body of at most max bytes decompressed
// (decodedBody; more is errBodyTooLarge), cut off after StallTimeout
// without progress; the read deadline is cleared after.
//
// The bytes read are counted against MaxBodyMemory until release is
// called (when the request no longer holds the body); a body refused
// for want of room fails with errBodyMemory (refuseBodyMemory answers
// it).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, max int64) (_ []byte, release func(), _ error) {
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	decoded, gz, perr := decodedBody(r, http.MaxBytesReader(nil, &stallBody{r: r.Body, rc: rc, stall: s.cfg.StallTimeout}, max+1), max)
	counted := s.bodyMem.reader(decoded)
	if perr != nil {
		return nil, counted.release, perr
	}
	if gz != nil {
		defer gz.Close()
	}
	b, err := io.ReadAll(counted)
	if counted.refused {
		err = errBodyMemory
	}
	return b, counted.release, err
}

// mediaTypeIs reports whether a request's Content-Type is want; if not,
// it answers 415 with code.
func (s *Server) mediaTypeIs(w http.ResponseWriter, r *http.Request, route, want, code string) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == want {
		return true
	}
	s.writeError(w, route, &syncerr.Error{Code: code, Message: "content type must be " + want, HTTPStatus: http.StatusUnsupportedMediaType})
	return false
}

// stallBody re-arms the connection's read deadline before each read of a
// request body: a slow client may take as long as it needs while bytes
// keep arriving, one that stalls for the stall timeout is cut off.
type stallBody struct {
	r     io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
}

func (b *stallBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.stall))
	return b.r.Read(p)
}

func (b *stallBody) Close() error { return b.r.Close() }

// clientWriteError is a write of a response to the client's connection
// that failed: the client stopped reading (the write deadline passed) or
// its connection broke. It is the client's doing, not a server fault.
type clientWriteError struct{ err error }

func (e clientWriteError) Error() string { return e.err.Error() }
func (e clientWriteError) Unwrap() error { return e.err }

// writeChunk is the largest write a deadlineWriter passes on under one
// deadline.
const writeChunk = 32 << 10

// deadlineWriter writes a response in chunks, each under its own write
// deadline: a client that stops reading is cut off after the timeout
// instead of holding the response (and its compressor) forever, while a
// slow one that keeps reading is served however long it takes.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), writeChunk)]
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
		m, err := d.w.Write(c)
		n += m
		if err != nil {
			return n, clientWriteError{err}
		}
		p = p[m:]
	}
	return n, nil
}

// flushWriter writes through to the compressor; the encoder writes in
// chunks of about 32 KiB, so the response streams as it is produced.
type flushWriter struct {
	w  io.Writer
	rw http.ResponseWriter
}

func (f *flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }
