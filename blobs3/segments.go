package blobs3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/syncgo/syncgo/store"
)

// Segments is a segment store (store.SegmentStore) whose bytes are also
// objects in the bucket, under <prefix>s/<segment id>, so that clients
// fetch them from the object store by presigned URL (§5.4 delegated
// presign, store.SegmentPresigner) and the bytes never pass through the
// server. The publication index, expiry and sweep stay in Index (the
// database's segment store), which also keeps a copy of the bytes for the
// server's own download route (§5.5) and clients without URLs.
type Segments struct {
	// Index is the authoritative segment store.
	Index store.SegmentStore
	// Objects is the bucket the bytes are written to.
	Objects *Store
}

var (
	_ store.SegmentStore     = (*Segments)(nil)
	_ store.SegmentPresigner = (*Segments)(nil)
)

func (s *Segments) segKey(id string) (string, error) {
	if id == "" || len(id) > 256 || strings.ContainsAny(id, "/\\?#%") || id == "." || id == ".." {
		return "", fmt.Errorf("blobs3: invalid segment id %q", id)
	}
	return s.Objects.prefix + "s/" + id, nil
}

// segGrace is how old an object of a segment the index no longer holds
// must be before a sweep deletes it; a publication re-writes an object
// older than half of it, so a sweep racing with a publisher does not
// delete bytes the index just started to hold again.
const segGrace = 10 * time.Minute

// PublishSegment implements store.SegmentStore: the index first (it
// detects hash collisions), then the bytes to the object store (content
// addressed: rewriting them is harmless).
func (s *Segments) PublishSegment(ctx context.Context, id string, b []byte, pub store.SegmentPublication) error {
	k, err := s.segKey(id)
	if err != nil {
		return err
	}
	if err := s.Index.PublishSegment(ctx, id, b, pub); err != nil || b == nil {
		return err
	}
	st, err := s.Objects.c.StatObject(ctx, s.Objects.bucket, k, minio.StatObjectOptions{})
	switch {
	case err == nil && st.Size != int64(len(b)):
		return fmt.Errorf("blobs3: segment %s stored with %d bytes, not %d (hash collision)", id, st.Size, len(b))
	case err == nil && time.Since(st.LastModified) < segGrace/2:
		return nil
	case err != nil && minio.ToErrorResponse(err).StatusCode != 404:
		return fmt.Errorf("blobs3: stat segment: %w", err)
	}
	if _, err := s.Objects.c.PutObject(ctx, s.Objects.bucket, k, bytes.NewReader(b), int64(len(b)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true, SendContentMd5: true}); err != nil {
		return fmt.Errorf("blobs3: put segment: %w", err)
	}
	return nil
}

// Segment implements store.SegmentStore from the index.
func (s *Segments) Segment(ctx context.Context, id string) (store.Segment, error) {
	return s.Index.Segment(ctx, id)
}

// FindSegment implements store.SegmentStore from the index.
func (s *Segments) FindSegment(ctx context.Context, key store.SegmentKey, nowMs int64) (store.SegmentRecord, error) {
	return s.Index.FindSegment(ctx, key, nowMs)
}

// SweepSegments implements store.SegmentStore: it sweeps the index, then
// deletes the objects, older than beforeMs less a grace of 10 minutes, of
// segments the index no longer holds.
func (s *Segments) SweepSegments(ctx context.Context, beforeMs int64) (store.SegmentSweep, error) {
	sw, err := s.Index.SweepSegments(ctx, beforeMs)
	if err != nil {
		return sw, err
	}
	pfx := s.Objects.prefix + "s/"
	for oi := range s.Objects.c.ListObjects(ctx, s.Objects.bucket, minio.ListObjectsOptions{Prefix: pfx, Recursive: true}) {
		if oi.Err != nil {
			return sw, fmt.Errorf("blobs3: sweep segments: %w", oi.Err)
		}
		if oi.LastModified.After(time.UnixMilli(beforeMs).Add(-segGrace)) {
			continue
		}
		_, err := s.Index.Segment(ctx, strings.TrimPrefix(oi.Key, pfx))
		if !errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err := s.Objects.c.RemoveObject(ctx, s.Objects.bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
			return sw, fmt.Errorf("blobs3: sweep segments: %w", err)
		}
	}
	return sw, nil
}

// SegmentStats implements store.SegmentStore from the index.
func (s *Segments) SegmentStats(ctx context.Context) (store.SegmentStats, error) {
	return s.Index.SegmentStats(ctx)
}

// PresignSegmentGet implements store.SegmentPresigner: the object
// store's presigned GET of the segment's object, whose key embeds the
// segment id.
func (s *Segments) PresignSegmentGet(ctx context.Context, segmentID string, ttl time.Duration) (string, error) {
	k, err := s.segKey(segmentID)
	if err != nil {
		return "", err
	}
	u, err := s.Objects.c.PresignedGetObject(ctx, s.Objects.bucket, k, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("blobs3: presign: %w", err)
	}
	return u.String(), nil
}
