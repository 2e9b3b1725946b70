package engine

import (
	"sync"
)

// hotSegments keeps the bytes of the segments this process published
// lately, with the publications it recorded, so that the downloads that
// follow a bootstrap (the client fetches every SEGMENT_REF within moments)
// are answered without reading the bytes back from the segment store.
//
// It is a read-through cache in front of the store, never a replacement:
// an entry is added only after the store accepted the publication, and a
// download that the remembered publications do not authorize (another
// process's publication, an expiry this process did not see extended, a
// digest it never published) is answered from the store as before. The
// bytes are content-addressed, so a cached entry is never stale; the
// authorization runs in full on every download either way. Bounded in
// bytes: the oldest entries go first.
type hotSegments struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    []string
	m        map[string]*hotSegment
}

type hotSegment struct {
	// bytes are the segment's bytes, or its body in the coding enc (the
	// segment store's body, §5.5 downloads serve it as it is), of
	// byteLength bytes decoded.
	bytes      []byte
	enc        string
	byteLength int64
	pubs       []Publication
}

const (
	// hotSegmentBytes bounds the bytes the cache holds.
	hotSegmentBytes = 64 << 20
	// hotPublicationsMax bounds the publications remembered per segment;
	// the download of a context past it goes to the store.
	hotPublicationsMax = 16
)

// add records a publication of a segment the store accepted. seg holds
// what the store kept of it (its bytes, or its body in seg.Encoding), or
// nil bytes when the publication refreshed a segment stored before (then
// only a cached entry is updated).
func (h *hotSegments) add(id string, seg Segment, pub Publication) {
	b := seg.Bytes
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.m[id]; ok {
		for i := range s.pubs {
			if s.pubs[i].SameContext(pub) {
				s.pubs[i].ExpiresAtMs = max(s.pubs[i].ExpiresAtMs, pub.ExpiresAtMs)
				return
			}
		}
		if len(s.pubs) < hotPublicationsMax {
			s.pubs = append(s.pubs, pub)
		}
		return
	}
	limit := h.maxBytes
	if limit == 0 {
		limit = hotSegmentBytes
	}
	if b == nil || len(b) > limit/4 {
		return
	}
	if h.m == nil {
		h.m = map[string]*hotSegment{}
	}
	h.m[id] = &hotSegment{bytes: b, enc: seg.Encoding, byteLength: seg.ByteLength, pubs: []Publication{pub}}
	h.order = append(h.order, id)
	h.bytes += len(b)
	for h.bytes > limit && len(h.order) > 0 {
		old := h.order[0]
		h.order = h.order[1:]
		if s, ok := h.m[old]; ok {
			h.bytes -= len(s.bytes)
			delete(h.m, old)
		}
	}
}

// get returns the cached segment: its bytes or body (shared, never
// modified) and a copy of the remembered publications.
func (h *hotSegments) get(id string) (Segment, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.m[id]
	if !ok {
		return Segment{}, false
	}
	return Segment{ID: id, Bytes: s.bytes, Encoding: s.enc, ByteLength: s.byteLength, Publications: append([]Publication(nil), s.pubs...)}, true
}
