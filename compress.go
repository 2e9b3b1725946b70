package syncgo

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// codecPools reuse compressors across responses; a zstd encoder in
// particular is expensive to create.
type codecPools struct {
	gzip sync.Pool
	zstd sync.Pool
}

func newCodecPools() *codecPools {
	p := &codecPools{}
	p.gzip.New = func() any {
		w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return w
	}
	p.zstd.New = func() any {
		// A 256 KiB window keeps a pooled encoder small (responses stream
		// in chunks of about 32 KiB); the default window made each encoder
		// several MiB, which a burst of concurrent responses multiplied.
		w, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(256<<10))
		return w
	}
	return p
}

// negotiate picks the response encoding from Accept-Encoding: zstd, then
// gzip, else identity (§1.3). A coding with a zero q-value is refused.
func negotiate(r *http.Request) string {
	accept := strings.Join(r.Header.Values("Accept-Encoding"), ",")
	zstdOK, gzipOK := false, false
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !acceptable(params) {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "zstd":
			zstdOK = true
		case "gzip":
			gzipOK = true
		}
	}
	switch {
	case zstdOK:
		return "zstd"
	case gzipOK:
		return "gzip"
	}
	return ""
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

// compressedWriter wraps w in the negotiated encoder. close finishes the
// stream and returns the encoder to its pool.
func (p *codecPools) writer(w io.Writer, encoding string) (io.Writer, func() error) {
	switch encoding {
	case "gzip":
		gz := p.gzip.Get().(*gzip.Writer)
		gz.Reset(w)
		return gz, func() error {
			err := gz.Close()
			p.gzip.Put(gz)
			return err
		}
	case "zstd":
		zw := p.zstd.Get().(*zstd.Encoder)
		zw.Reset(w)
		return zw, func() error {
			err := zw.Close()
			p.zstd.Put(zw)
			return err
		}
	}
	return w, func() error { return nil }
}
