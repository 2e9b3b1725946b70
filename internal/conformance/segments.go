package conformance

import (
	"context"
	"io"

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

// BlobStore implements store.BlobStorer: the blobs live in the instance's
// current database, which a restore replaces with its backup (blobs
// included).
func (s *instanceStore) BlobStore() store.BlobStore { return instanceBlobs{s} }

// BlobRefs implements store.BlobRefIndex.
func (s *instanceStore) BlobRefs(ctx context.Context, partition, blobID string, after *store.BlobRef, limit int) ([]store.BlobRef, error) {
	return s.current().BlobRefs(ctx, partition, blobID, after, limit)
}

type instanceBlobs struct{ s *instanceStore }

func (g instanceBlobs) cur() store.BlobStore { return g.s.current().BlobStore() }

func (g instanceBlobs) PutBlob(ctx context.Context, partition, blobID, mediaType string, r io.Reader, nowMs int64) error {
	return g.cur().PutBlob(ctx, partition, blobID, mediaType, r, nowMs)
}

func (g instanceBlobs) StatBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, error) {
	return g.cur().StatBlob(ctx, partition, blobID)
}

func (g instanceBlobs) OpenBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, io.ReadCloser, error) {
	return g.cur().OpenBlob(ctx, partition, blobID)
}

func (g instanceBlobs) ListBlobs(ctx context.Context, createdBeforeMs int64, cursor string, limit int) ([]store.BlobInfo, string, error) {
	return g.cur().ListBlobs(ctx, createdBeforeMs, cursor, limit)
}

func (g instanceBlobs) DeleteBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64) (bool, error) {
	return g.cur().DeleteBlob(ctx, partition, blobID, createdBeforeMs)
}

func (g instanceBlobs) SweepUploads(ctx context.Context, startedBeforeMs int64) (int64, error) {
	return g.cur().SweepUploads(ctx, startedBeforeMs)
}
