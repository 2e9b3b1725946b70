package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/syncgo/syncgo/store"
)

// Publication is one context a stored segment was published in (§5.1).
type Publication = store.SegmentPublication

// Segment is a stored segment: its content address, bytes and
// publications.
type Segment = store.Segment

// SegmentStore keeps the segments served by reference (SEGMENT_REF) for
// the download endpoint.
type SegmentStore = store.SegmentStore

// SweepSegments deletes the segment publications that expired more than
// Limits.SegmentForgetAfter ago, and the segments left without any.
func (e *Engine) SweepSegments(ctx context.Context) (store.SegmentSweep, error) {
	return e.cfg.Segments.SweepSegments(ctx, e.cfg.Now()-e.cfg.Limits.SegmentForgetAfter.Milliseconds())
}

// RunSegmentSweeps sweeps the segment store every interval until ctx
// ends. Failures are logged and retried next round.
func (e *Engine) RunSegmentSweeps(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sw, err := e.SweepSegments(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.cfg.Logger.WarnContext(ctx, "segment sweep failed", "err", err)
		case sw.Segments > 0 || sw.Publications > 0:
			e.cfg.Logger.InfoContext(ctx, "segments swept", "segments", sw.Segments, "publications", sw.Publications, "bytes", sw.Bytes)
		}
	}
}

// MemorySegments is an in-process SegmentStore bounded in bytes; the
// oldest segments are forgotten first. Only the process that published a
// segment serves it, and a restart forgets them all: it is for tests and
// for stores without a segment store of their own.
type MemorySegments struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    []string
	segs     map[string]*Segment
}

var _ store.SegmentStore = (*MemorySegments)(nil)

// NewMemorySegments returns a store holding at most maxBytes of segments.
func NewMemorySegments(maxBytes int) *MemorySegments {
	return &MemorySegments{maxBytes: maxBytes, segs: map[string]*Segment{}}
}

// PublishSegment implements store.SegmentStore.
func (m *MemorySegments) PublishSegment(_ context.Context, id string, b []byte, pub Publication) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.segs[id]
	if !ok && b == nil {
		return store.ErrNotFound
	}
	if ok {
		if b != nil && len(s.Bytes) != len(b) {
			return fmt.Errorf("segment %s: stored bytes differ from the published ones (hash collision)", id)
		}
		for i := range s.Publications {
			if s.Publications[i].SameContext(pub) {
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
		m.forget(m.order[0])
	}
	return nil
}

// forget drops a segment; m.mu is held.
func (m *MemorySegments) forget(id string) {
	s, ok := m.segs[id]
	if !ok {
		return
	}
	m.bytes -= len(s.Bytes)
	delete(m.segs, id)
	for i, o := range m.order {
		if o == id {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

// Segment implements store.SegmentStore.
func (m *MemorySegments) Segment(_ context.Context, id string) (Segment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.segs[id]
	if !ok {
		return Segment{}, store.ErrNotFound
	}
	c := *s
	c.Publications = append([]Publication(nil), s.Publications...)
	return c, nil
}

// FindSegment implements store.SegmentStore.
func (m *MemorySegments) FindSegment(_ context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best store.SegmentRecord
	for _, id := range m.order {
		s := m.segs[id]
		for _, p := range s.Publications {
			if p.RowCursor == nil && p.ExpiresAtMs > nowMs && store.KeyOf(p) == key && (best.ID == "" || p.ExpiresAtMs > best.Publication.ExpiresAtMs) {
				best = store.SegmentRecord{ID: id, ByteLength: int64(len(s.Bytes)), Publication: p}
			}
		}
	}
	if best.ID == "" {
		return best, store.ErrNotFound
	}
	return best, nil
}

// SweepSegments implements store.SegmentStore.
func (m *MemorySegments) SweepSegments(_ context.Context, beforeMs int64) (store.SegmentSweep, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out store.SegmentSweep
	for _, id := range append([]string(nil), m.order...) {
		s := m.segs[id]
		kept := s.Publications[:0]
		for _, p := range s.Publications {
			if p.ExpiresAtMs < beforeMs {
				out.Publications++
				continue
			}
			kept = append(kept, p)
		}
		s.Publications = kept
		if len(kept) == 0 {
			out.Segments++
			out.Bytes += int64(len(s.Bytes))
			m.forget(id)
		}
	}
	return out, nil
}

// SegmentStats implements store.SegmentStore.
func (m *MemorySegments) SegmentStats(context.Context) (store.SegmentStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := store.SegmentStats{Segments: int64(len(m.segs)), Bytes: int64(m.bytes)}
	for _, s := range m.segs {
		st.Publications += int64(len(s.Publications))
	}
	return st, nil
}

// recentPublications remembers the publications this process recorded
// lately, so that a bootstrap storm (many clients pulling the same pages
// within seconds) does not write the same publication to the segment store
// once per SEGMENT_REF. A publication recorded less than
// republishAfter ago whose expiry is more than half a TTL away is not
// written again; anything older is, so a segment the store lost (an
// operator's delete, a restored database) is stored again within
// republishAfter.
type recentPublications struct {
	mu sync.Mutex
	m  map[string]recentPublication
}

type recentPublication struct{ atMs, expiresAtMs int64 }

const (
	republishAfter          = 60_000 // ms
	recentPublicationsLimit = 8192
)

func (c *recentPublications) fresh(key string, nowMs, ttlMs int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[key]
	return ok && nowMs >= r.atMs && nowMs-r.atMs < republishAfter && r.expiresAtMs-nowMs > ttlMs/2
}

func (c *recentPublications) record(key string, nowMs, expiresAtMs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= recentPublicationsLimit {
		c.m = map[string]recentPublication{}
	}
	c.m[key] = recentPublication{atMs: nowMs, expiresAtMs: expiresAtMs}
}

// publish records a segment publication in the segment store, unless this
// process recorded the same one moments ago (recentPublications). With nil
// bytes the segment must be stored already.
func (e *Engine) publish(ctx context.Context, id string, b []byte, pub Publication) error {
	if b == nil {
		return e.publishFrom(ctx, id, nil, pub)
	}
	return e.publishFrom(ctx, id, &segmentSource{b: b, size: int64(len(b))}, pub)
}

// segmentSource is the bytes of a segment to publish: in memory (b), or
// read from r (an image's file), size bytes.
type segmentSource struct {
	b    []byte
	r    io.ReaderAt
	size int64
}

func (s *segmentSource) reader() io.Reader {
	if s.b != nil {
		return bytes.NewReader(s.b)
	}
	return io.NewSectionReader(s.r, 0, s.size)
}

// bytes returns the segment's bytes, never nil (nil bytes would publish
// no segment, only a publication of one stored before).
func (s *segmentSource) bytes() ([]byte, error) {
	if s.b != nil {
		return s.b, nil
	}
	out := make([]byte, s.size)
	if _, err := io.ReadFull(s.reader(), out); err != nil {
		return nil, err
	}
	return out, nil
}

// publishFrom is publish of a segment read from src (nil: stored already).
func (e *Engine) publishFrom(ctx context.Context, id string, src *segmentSource, pub Publication) error {
	key := id + "\x00" + pub.ContextKey()
	now := e.cfg.Now()
	if e.published.fresh(key, now, e.cfg.Limits.SegmentTTL.Milliseconds()) {
		return nil
	}
	kept, err := e.storeSegment(ctx, id, src, pub)
	if err != nil {
		return err
	}
	e.published.record(key, now, pub.ExpiresAtMs)
	e.hot.add(id, kept, pub)
	return nil
}

// storeSegment publishes a segment in the segment store: as its body
// when the engine encodes segments and the store keeps bodies, else as
// its bytes. It returns what it stored (nil bytes when src is nil), which
// the hot segments keep: a body is read from src without the segment's
// bytes in memory.
func (e *Engine) storeSegment(ctx context.Context, id string, src *segmentSource, pub Publication) (Segment, error) {
	if src != nil && e.cfg.EncodeSegment != nil {
		if bs, ok := e.cfg.Segments.(store.SegmentBodyStore); ok {
			enc, body, err := e.cfg.EncodeSegment(id, src.reader(), src.size)
			if err != nil {
				return Segment{}, fmt.Errorf("encode segment %s: %w", id, err)
			}
			if err := bs.PublishSegmentBody(ctx, id, src.size, enc, body, pub); err != nil {
				return Segment{}, err
			}
			return Segment{ID: id, Bytes: body, Encoding: enc, ByteLength: src.size}, nil
		}
	}
	var b []byte
	if src != nil {
		var err error
		if b, err = src.bytes(); err != nil {
			return Segment{}, fmt.Errorf("read segment %s: %w", id, err)
		}
	}
	if err := e.cfg.Segments.PublishSegment(ctx, id, b, pub); err != nil {
		return Segment{}, err
	}
	return Segment{ID: id, Bytes: b, ByteLength: int64(len(b))}, nil
}

// storedSegment reads a segment from the segment store, as its body when
// the store keeps bodies (Segment.Encoding names the coding).
func (e *Engine) storedSegment(ctx context.Context, id string) (Segment, error) {
	if bs, ok := e.cfg.Segments.(store.SegmentBodyStore); ok {
		return bs.SegmentBody(ctx, id)
	}
	return e.cfg.Segments.Segment(ctx, id)
}
