package wire

import (
	"bytes"
	"path/filepath"
	"testing"
)

// fuzzMessage checks that a message either fails to decode with a protocol
// code or decodes, re-encodes to the same bytes, and decodes the same way
// from a stream.
func fuzzMessage(t *testing.T, data []byte, kind MsgKind) {
	opts := DecoderOptions{Kind: kind, MaxFrameBytes: 1 << 20}
	m, err := DecodeMessage(data, opts)
	_, serr := ReadMessage(bytes.NewReader(data), opts)
	if (err == nil) != (serr == nil) {
		t.Fatalf("slice decode err %v, stream decode err %v", err, serr)
	}
	if err != nil {
		if code := ErrorCode(err); code != CodeInvalidRequest && code != CodeEmptyCommit {
			t.Fatalf("decode error without a protocol code: %v", err)
		}
		return
	}
	re, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("decoded message does not re-encode: %v", err)
	}
	if !bytes.Equal(re, data) {
		t.Fatalf("re-encoding differs\n got: %x\nwant: %x", re, data)
	}
	if _, err := RenderMessage(m); err != nil {
		t.Fatalf("render: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	addVectorSeeds(f, "request", filepath.Join("v3", "request"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzMessage(t, data, KindRequest) })
}

func FuzzDecodeResponse(f *testing.F) {
	addVectorSeeds(f, "response", filepath.Join("v3", "response"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzMessage(t, data, KindResponse) })
}
