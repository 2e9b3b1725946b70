package syncgo

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// codecPools reuse compressors across responses; a zstd encoder in
// particular is expensive to create (about 340 KiB). The pools are
// bounded free lists, not sync.Pools: a sync.Pool keeps every encoder a
// burst created until two garbage collections have run, and an idle
// server runs none, so a burst's encoders stayed resident. At most
// pooledEncoders of each kind are kept; the others become garbage when
// their response ends. How many exist at once is bounded by the
// admission cap (Config.MaxConcurrentRequests), and a response takes its
// compressor only when its first bytes go out.
type codecPools struct {
	gzip chan *gzip.Writer
	zstd chan *zstd.Encoder
}

// pooledEncoders is how many idle compressors of each kind are kept.
const pooledEncoders = 16

func newCodecPools() *codecPools {
	return &codecPools{gzip: make(chan *gzip.Writer, pooledEncoders), zstd: make(chan *zstd.Encoder, pooledEncoders)}
}

func (p *codecPools) getGzip() *gzip.Writer {
	select {
	case w := <-p.gzip:
		return w
	default:
		w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return w
	}
}

func (p *codecPools) getZstd() *zstd.Encoder {
	select {
	case w := <-p.zstd:
		return w
	default:
		// A 256 KiB window keeps an encoder small (responses stream in
		// chunks of about 32 KiB); the default window made each encoder
		// several MiB.
		w, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(256<<10))
		return w
	}
}

// put returns a compressor to its free list, or drops it when the list
// is full. It is detached from the response first, so an idle pooled
// encoder holds no reference to a finished connection.
func put[T interface{ Reset(io.Writer) }](ch chan T, w T) {
	w.Reset(io.Discard)
	select {
	case ch <- w:
	default:
	}
}

// negotiate picks the response encoding from Accept-Encoding: zstd, then
// gzip, else identity (§1.3). A coding with a zero q-value is refused.
func negotiate(r *http.Request) string {
	enc, _ := negotiateAll(r)
	return enc
}

// negotiateAll is negotiate, and also reports whether Accept-Encoding
// refuses the identity coding: "identity;q=0", or "*;q=0" without identity
// named (RFC 9110 §12.5.3). A server then compresses even a small
// response. The header is read once.
func negotiateAll(r *http.Request) (enc string, identityRefused bool) {
	zstdOK, gzipOK := false, false
	identityNamed, starRefused := false, false
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			ok := acceptable(params)
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "zstd":
				zstdOK = zstdOK || ok
			case "gzip":
				gzipOK = gzipOK || ok
			case "identity":
				identityNamed = true
				identityRefused = identityRefused || !ok
			case "*":
				starRefused = starRefused || !ok
			}
		}
	}
	identityRefused = identityRefused || (starRefused && !identityNamed)
	switch {
	case zstdOK:
		enc = "zstd"
	case gzipOK:
		enc = "gzip"
	}
	return enc, identityRefused
}

// acceptable reports whether the parameters of an Accept-Encoding element
// leave its coding acceptable: a q-value of zero, however spelled (q=0,
// Q=0.0, q=0.000), refuses it (RFC 9110 §12.4.2). An unreadable q-value
// is ignored.
func acceptable(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q <= 0 {
			return false
		}
	}
	return true
}

// compressBody is the engine's CompressBody: a whole /sync response
// message compressed as a response in encoding streams it (one stream of
// the pooled compressor), for a catch-up window's body compressed ahead.
// A message the transport sends uncompressed (smallResponse) or an
// unknown coding is refused.
func (s *Server) compressBody(encoding string, raw []byte) ([]byte, bool) {
	if len(raw) <= smallResponse || (encoding != "zstd" && encoding != "gzip") {
		return nil, false
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(raw)/8+512))
	w, closeEnc := s.codecs.writer(buf, encoding)
	_, err := w.Write(raw)
	if cerr := closeEnc(); err != nil || cerr != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// writer wraps w in the negotiated encoder. close finishes the stream and
// returns the encoder to its pool.
func (p *codecPools) writer(w io.Writer, encoding string) (io.Writer, func() error) {
	switch encoding {
	case "gzip":
		gz := p.getGzip()
		gz.Reset(w)
		return gz, func() error {
			err := gz.Close()
			put(p.gzip, gz)
			return err
		}
	case "zstd":
		zw := p.getZstd()
		zw.Reset(w)
		return zw, func() error {
			err := zw.Close()
			put(p.zstd, zw)
			return err
		}
	}
	return w, func() error { return nil }
}
