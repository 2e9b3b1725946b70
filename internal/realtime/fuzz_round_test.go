package realtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// FuzzStreamScanner: the scanner that finds where a round's request
// stream ends (§8.7) reads the same however the stream is cut into
// chunks, and agrees with the SSP2 decoder: a request the decoder takes
// ends exactly at its last byte, and one byte more is a byte past END.
func FuzzStreamScanner(f *testing.F) {
	root := filepath.Join("..", "..", "wire", "testdata", "ssp2-vectors")
	for _, dir := range []string{"request", filepath.Join("v3", "request")} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.bin"))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b, uint8(3))
			}
		}
	}
	f.Add([]byte("SSP2\x01\x00\x01\x00\xff\x00\x00\x00\x00"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		whole := newStreamScanner()
		whole.feed(data)
		cut := newStreamScanner()
		n := int(step) + 1
		for i := 0; i < len(data); i += n {
			cut.feed(data[i:min(len(data), i+n)])
		}
		if whole != cut {
			t.Fatalf("whole %+v, in %d-byte chunks %+v", whole, n, cut)
		}
		if len(data) < 8 || !validRequestHeader(data[:8]) {
			return
		}
		if _, err := wire.DecodeRequest(data, wire.DecoderOptions{Kind: wire.KindRequest, MaxFrameBytes: 1 << 20}); err != nil {
			return
		}
		if !whole.ended || whole.past != 0 {
			t.Fatalf("a request the decoder takes: scanner %+v", whole)
		}
		whole.feed([]byte{0})
		if whole.past != 1 {
			t.Fatalf("a byte after the request: scanner %+v", whole)
		}
	})
}
