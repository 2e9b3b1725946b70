package syncgo

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/syncgo/syncgo/internal/engine"
)

// A cached segment body decodes to the segment's bytes in each encoding,
// a second download gets the cached body, and the cache stays within its
// bound.
func TestSegmentBodiesCache(t *testing.T) {
	var c segmentBodies
	codecs := newCodecPools()
	raw := bytes.Repeat([]byte("segment row payload "), 5000)
	for _, enc := range []string{"zstd", "gzip"} {
		b, err := c.body(codecs, "sha256:x", raw, enc)
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader
		if enc == "zstd" {
			d, err := zstd.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			r = d
		} else if r, err = gzip.NewReader(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%s body decodes to %d bytes (%v), want the %d raw bytes", enc, len(got), err, len(raw))
		}
		again, err := c.body(codecs, "sha256:x", nil, enc)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s: the second download did not get the cached body", enc)
		}
	}
	rnd := rand.NewChaCha8([32]byte{1})
	for i := range 60 {
		big := make([]byte, 1<<20) // incompressible: about 1 MiB of body each
		_, _ = rnd.Read(big)
		if _, err := c.body(codecs, fmt.Sprintf("sha256:%d", i), big, "zstd"); err != nil {
			t.Fatal(err)
		}
	}
	if c.bytes > segmentBodyBytes || c.bytes < segmentBodyBytes/2 {
		t.Fatalf("%d bytes cached, bound %d", c.bytes, segmentBodyBytes)
	}
	if _, ok := c.m[bodyKey{"sha256:0", "zstd"}]; ok {
		t.Fatal("the oldest body survived past the bound")
	}
}

// A download in a coding whose body is kept is answered with that body,
// without decoding the body the segment is held in (the hot segments'
// or the store's zstd): here that one is not even valid zstd.
func TestWriteSegmentKeptBodyFirst(t *testing.T) {
	s := &Server{codecs: newCodecPools()}
	s.cfg.WriteTimeout = 5 * time.Second
	s.cfg.Logger = slog.New(slog.DiscardHandler)
	raw := bytes.Repeat([]byte("segment row payload "), 500)
	gz, err := s.bodies.body(s.codecs, "sha256:y", raw, "gzip")
	if err != nil {
		t.Fatal(err)
	}
	held := engine.Body{Bytes: []byte("not a zstd frame"), Encoding: "zstd", ByteLength: int64(len(raw))}
	rec := httptest.NewRecorder()
	s.writeSegment(rec, "sha256:y", held, "gzip")
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), gz) {
		t.Fatalf("gzip download: HTTP %d, %d bytes; want the kept gzip body (%d bytes)", rec.Code, rec.Body.Len(), len(gz))
	}
	// Not kept in identity: that one is decoded, and a body that does
	// not decode is an error, not a response of garbage.
	rec = httptest.NewRecorder()
	s.writeSegment(rec, "sha256:y", held, "")
	if rec.Code == http.StatusOK {
		t.Fatal("an identity download of an undecodable body answered 200")
	}
}
