package engine

import (
	"context"
	"sync"

	"github.com/syncgo/syncgo/wire"
)

// Publication is one context a stored segment was published in (§5.1).
type Publication struct {
	Partition     string
	LogEpoch      string
	Table         string
	SchemaVersion int32
	MediaType     wire.MediaType
	ScopeDigest   string
	AsOfCommitSeq int64
	RowCursor     *string
	NextRowCursor *string
	RowCount      int64
	CreatedAtMs   int64
	ExpiresAtMs   int64
}

// Segment is a stored segment: its content address, bytes and
// publications.
type Segment struct {
	ID           string
	Bytes        []byte
	Publications []Publication
}

// SegmentStore keeps the segments served by reference (SEGMENT_REF) for
// the download endpoint.
type SegmentStore interface {
	// Publish stores bytes under id (content-addressed) and records the
	// publication; a publication with the same context extends its own
	// expiry.
	Publish(ctx context.Context, id string, bytes []byte, pub Publication) error
	// Get returns a segment; false when it is unknown or forgotten.
	Get(ctx context.Context, id string) (Segment, bool, error)
}

// MemorySegments is an in-process SegmentStore bounded in bytes; the
// oldest segments are forgotten first.
type MemorySegments struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    []string
	segs     map[string]*Segment
}

// NewMemorySegments returns a store holding at most maxBytes of segments.
func NewMemorySegments(maxBytes int) *MemorySegments {
	return &MemorySegments{maxBytes: maxBytes, segs: map[string]*Segment{}}
}

func samePublication(a, b Publication) bool {
	return a.Partition == b.Partition && a.LogEpoch == b.LogEpoch && a.Table == b.Table &&
		a.SchemaVersion == b.SchemaVersion && a.MediaType == b.MediaType && a.ScopeDigest == b.ScopeDigest &&
		a.AsOfCommitSeq == b.AsOfCommitSeq && eqPtr(a.RowCursor, b.RowCursor) && eqPtr(a.NextRowCursor, b.NextRowCursor)
}

func eqPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Publish implements SegmentStore.
func (m *MemorySegments) Publish(_ context.Context, id string, b []byte, pub Publication) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.segs[id]; ok {
		for i := range s.Publications {
			if samePublication(s.Publications[i], pub) {
				s.Publications[i].ExpiresAtMs = max(s.Publications[i].ExpiresAtMs, pub.ExpiresAtMs)
				return nil
			}
		}
		s.Publications = append(s.Publications, pub)
		return nil
	}
	m.segs[id] = &Segment{ID: id, Bytes: b, Publications: []Publication{pub}}
	m.order = append(m.order, id)
	m.bytes += len(b)
	for m.bytes > m.maxBytes && len(m.order) > 1 {
		old := m.order[0]
		m.order = m.order[1:]
		if s, ok := m.segs[old]; ok {
			m.bytes -= len(s.Bytes)
			delete(m.segs, old)
		}
	}
	return nil
}

// Get implements SegmentStore.
func (m *MemorySegments) Get(_ context.Context, id string) (Segment, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.segs[id]
	if !ok {
		return Segment{}, false, nil
	}
	c := *s
	c.Publications = append([]Publication(nil), s.Publications...)
	return c, true, nil
}
