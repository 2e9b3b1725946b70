package syncgo

import (
	"io"
	"net/http"
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
		w, _ := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
		return w
	}
	return p
}

// negotiate picks the response encoding from Accept-Encoding: zstd, then
// gzip, else identity (§1.3).
func negotiate(r *http.Request) string {
	accept := r.Header.Get("Accept-Encoding")
	zstdOK, gzipOK := false, false
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") && !strings.Contains(params, "q=0.") {
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
