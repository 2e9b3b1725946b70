package syncgo

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
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
