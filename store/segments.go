package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/syncgo/syncgo/wire"
)

// SegmentPublication is one context a stored segment was published in
// (§5.1): where and for whom its bytes are a snapshot page, with its own
// creation time and expiry.
type SegmentPublication struct {
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

// SameContext reports whether two publications have the same context:
// everything but the row count and the times.
func (p SegmentPublication) SameContext(o SegmentPublication) bool {
	return p.Partition == o.Partition && p.LogEpoch == o.LogEpoch && p.Table == o.Table &&
		p.SchemaVersion == o.SchemaVersion && p.MediaType == o.MediaType && p.ScopeDigest == o.ScopeDigest &&
		p.AsOfCommitSeq == o.AsOfCommitSeq && eqStrPtr(p.RowCursor, o.RowCursor) && eqStrPtr(p.NextRowCursor, o.NextRowCursor)
}

// ContextKey is a string that identifies the publication's context (two
// publications have the same key iff SameContext): drivers key their
// publication records by (segment id, context key).
func (p SegmentPublication) ContextKey() string {
	var b strings.Builder
	field := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	opt := func(s *string) {
		if s == nil {
			b.WriteByte('-')
			return
		}
		b.WriteByte('+')
		field(*s)
	}
	field(p.Partition)
	field(p.LogEpoch)
	field(p.Table)
	field(strconv.FormatInt(int64(p.SchemaVersion), 10))
	field(strconv.Itoa(int(p.MediaType)))
	field(p.ScopeDigest)
	field(strconv.FormatInt(p.AsOfCommitSeq, 10))
	opt(p.RowCursor)
	opt(p.NextRowCursor)
	return b.String()
}

func eqStrPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Segment is a stored segment: its content address, its bytes and every
// publication of it the store still holds.
type Segment struct {
	ID    string
	Bytes []byte
	// Encoding is the content coding of Bytes: "" for the segment's own
	// bytes (whose hash is ID). Only SegmentBodyStore.SegmentBody returns
	// another ("zstd": Bytes is a zstd frame of the segment's bytes);
	// Segment always returns the segment's own bytes.
	Encoding string
	// ByteLength is the length of the segment's bytes (those of Bytes
	// once decoded); SegmentBody sets it, other readers may leave it 0.
	ByteLength   int64
	Publications []SegmentPublication
}

// SegmentKey is the reuse key of a whole-table segment (a sqlite image,
// §5.3): one stored image per key serves every client holding the same
// scopes at the same pin.
type SegmentKey struct {
	Partition     string
	LogEpoch      string
	Table         string
	SchemaVersion int32
	MediaType     wire.MediaType
	ScopeDigest   string
	AsOfCommitSeq int64
}

// SegmentRecord is a stored segment's address and size with one of its
// publications.
type SegmentRecord struct {
	ID          string
	ByteLength  int64
	Publication SegmentPublication
}

// KeyOf returns the reuse key of a publication.
func KeyOf(p SegmentPublication) SegmentKey {
	return SegmentKey{Partition: p.Partition, LogEpoch: p.LogEpoch, Table: p.Table, SchemaVersion: p.SchemaVersion,
		MediaType: p.MediaType, ScopeDigest: p.ScopeDigest, AsOfCommitSeq: p.AsOfCommitSeq}
}

// SegmentSweep reports a sweep of a segment store.
type SegmentSweep struct {
	// Publications and Segments count the records deleted.
	Publications int64
	Segments     int64
	// Bytes is the size of the segments deleted.
	Bytes int64
}

// SegmentStats are the counters of a segment store: what it holds now,
// expired entries not yet swept included.
type SegmentStats struct {
	Segments     int64
	Publications int64
	Bytes        int64
}

// SegmentStore keeps the segments served by reference (SEGMENT_REF, §5.4)
// for the download endpoint (§5.5) and for signed URLs. Segments are cache
// entries: a store may forget one at any time once it has expired. A store
// shared by several server processes (one database) lets any of them serve
// a segment another published. All methods are safe for concurrent use.
type SegmentStore interface {
	// PublishSegment stores bytes under their content address id (the
	// caller computed it) unless they are stored already, and records pub:
	// a publication whose context (SameContext) is already recorded gets
	// the later of the two expiries; a new context is added. Bytes already
	// stored under id with another length are a hash collision: an error,
	// and nothing changes. With nil bytes it only records the publication
	// of a segment already stored, and fails with ErrNotFound when the
	// segment is not (any more).
	PublishSegment(ctx context.Context, id string, bytes []byte, pub SegmentPublication) error
	// Segment returns a stored segment with all its publications, expired
	// ones included (the download tells sync.segment_expired from
	// sync.not_found); ErrNotFound when it is unknown or forgotten.
	Segment(ctx context.Context, id string) (Segment, error)
	// FindSegment returns a whole-table segment (no row cursor) published
	// under key whose publication is unexpired at nowMs, the one that
	// expires last; ErrNotFound when there is none.
	FindSegment(ctx context.Context, key SegmentKey, nowMs int64) (SegmentRecord, error)
	// SweepSegments deletes the publications that expired before beforeMs
	// and the segments left with no publication.
	SweepSegments(ctx context.Context, beforeMs int64) (SegmentSweep, error)
	// SegmentStats counts what the store holds.
	SegmentStats(ctx context.Context) (SegmentStats, error)
}

// SegmentBodyStore is implemented by segment stores that can keep a
// segment compressed: the body a download serves (a zstd frame of the
// segment's bytes, a few percent of their size for a rows page) instead of
// the bytes, so that a publication writes and a download reads the small
// body. Stores that keep bodies never let a server process that does not
// know them read a body as a segment's bytes (pgstore and sqlitestore keep
// them in a table of their own, sync_segment_bodies).
type SegmentBodyStore interface {
	SegmentStore
	// PublishSegmentBody is PublishSegment for a segment given as its
	// body: body holds the segment's bytes, plainLength of them, in the
	// content coding enc ("zstd"; the store refuses a coding it does not
	// decode). A segment already stored under id, as bytes or as a body,
	// keeps what is stored (the plain lengths must agree) and gains the
	// publication.
	PublishSegmentBody(ctx context.Context, id string, plainLength int64, enc string, body []byte, pub SegmentPublication) error
	// SegmentBody is Segment without decoding a stored body: the returned
	// Segment's Encoding names the coding of its Bytes ("" when the
	// segment is stored as its bytes).
	SegmentBody(ctx context.Context, id string) (Segment, error)
}

// SegmentStorer is implemented by drivers that keep segments in their own
// database, so that every server process on the database serves them.
type SegmentStorer interface {
	// SegmentStore returns the driver's segment store; it lives as long
	// as the driver.
	SegmentStore() SegmentStore
}

// SegmentPresigner is implemented by segment stores whose bytes another
// origin serves (an object store): it mints that origin's URL of a
// segment (§5.4 delegated presign), so the bytes never pass through the
// server.
type SegmentPresigner interface {
	// PresignSegmentGet returns a URL that answers the segment's bytes
	// without further authentication until ttl passes; the URL embeds the
	// segment id.
	PresignSegmentGet(ctx context.Context, segmentID string, ttl time.Duration) (string, error)
}
