package conformance

import (
	"context"

	"github.com/syncgo/syncgo/store"
)

// SegmentStore implements store.SegmentStorer: the segments live in the
// instance's current database, which restoreBackup replaces (with the
// log epoch rotated, so segments of the old database are stale anyway).
func (s *instanceStore) SegmentStore() store.SegmentStore { return instanceSegments{s} }

type instanceSegments struct{ s *instanceStore }

func (g instanceSegments) cur() store.SegmentStore { return g.s.current().SegmentStore() }

func (g instanceSegments) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	return g.cur().PublishSegment(ctx, id, b, pub)
}

func (g instanceSegments) Segment(ctx context.Context, id string) (store.Segment, error) {
	return g.cur().Segment(ctx, id)
}

func (g instanceSegments) FindSegment(ctx context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	return g.cur().FindSegment(ctx, key, nowMs)
}

func (g instanceSegments) SweepSegments(ctx context.Context, beforeMs int64) (store.SegmentSweep, error) {
	return g.cur().SweepSegments(ctx, beforeMs)
}

func (g instanceSegments) SegmentStats(ctx context.Context) (store.SegmentStats, error) {
	return g.cur().SegmentStats(ctx)
}
