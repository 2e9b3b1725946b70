package engine

import (
	"bytes"
	"fmt"
	"testing"
)

// The cache holds at most its byte bound (oldest first out), merges a
// republished context into its expiry, appends a new context, and does
// not invent an entry from a publication without bytes.
func TestHotSegmentsBoundsAndPublications(t *testing.T) {
	h := hotSegments{maxBytes: 4000}
	pub := Publication{Partition: "p", LogEpoch: "e", Table: "tasks", ScopeDigest: "d1", AsOfCommitSeq: 7, ExpiresAtMs: 100}
	h.add("nobytes", Segment{}, pub)
	if _, ok := h.get("nobytes"); ok {
		t.Fatal("a publication without bytes made an entry")
	}
	for i := range 10 {
		h.add(fmt.Sprintf("s%d", i), Segment{Bytes: bytes.Repeat([]byte{byte(i)}, 1000)}, pub)
	}
	if h.bytes > 4000 {
		t.Fatalf("%d bytes held, bound 4000", h.bytes)
	}
	if _, ok := h.get("s0"); ok {
		t.Fatal("the oldest entry survived past the bound")
	}
	seg, ok := h.get("s9")
	if !ok || !bytes.Equal(seg.Bytes, bytes.Repeat([]byte{9}, 1000)) || len(seg.Publications) != 1 {
		t.Fatalf("newest entry: %v %d bytes %d publications", ok, len(seg.Bytes), len(seg.Publications))
	}
	later := pub
	later.ExpiresAtMs = 500
	h.add("s9", Segment{}, later)
	other := pub
	other.ScopeDigest = "d2"
	h.add("s9", Segment{}, other)
	seg, _ = h.get("s9")
	if len(seg.Publications) != 2 || seg.Publications[0].ExpiresAtMs != 500 || seg.Publications[1].ScopeDigest != "d2" {
		t.Fatalf("publications after a refresh and a new context: %+v", seg.Publications)
	}
	seg.Publications[0].ExpiresAtMs = 1
	if again, _ := h.get("s9"); again.Publications[0].ExpiresAtMs != 500 {
		t.Fatal("get returned the cache's own publication slice")
	}
	if h.add("huge", Segment{Bytes: make([]byte, 2000)}, pub); func() bool { _, ok := h.get("huge"); return ok }() {
		t.Fatal("an entry over a quarter of the bound was kept")
	}
}

// A body (a segment store's compressed body) is kept as it is, with its
// coding and the length of the segment's bytes, and counts against the
// bound by its own length.
func TestHotSegmentsBody(t *testing.T) {
	h := hotSegments{maxBytes: 4000}
	pub := Publication{Partition: "p", LogEpoch: "e", Table: "tasks", ScopeDigest: "d1", ExpiresAtMs: 100}
	body := bytes.Repeat([]byte{7}, 900)
	h.add("img", Segment{ID: "img", Bytes: body, Encoding: "zstd", ByteLength: 1 << 20}, pub)
	seg, ok := h.get("img")
	if !ok || seg.Encoding != "zstd" || seg.ByteLength != 1<<20 || !bytes.Equal(seg.Bytes, body) {
		t.Fatalf("body entry: %v %q %d bytes, byteLength %d", ok, seg.Encoding, len(seg.Bytes), seg.ByteLength)
	}
	if h.bytes != 900 {
		t.Fatalf("%d bytes counted, want the body's 900", h.bytes)
	}
	if b := bodyOf(seg); b.Encoding != "zstd" || b.ByteLength != 1<<20 {
		t.Fatalf("served as %+v", b)
	}
}
