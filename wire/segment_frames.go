package wire

// MediaType is the media type of a SEGMENT_REF.
type MediaType uint8

// Segment media types (§5.4).
const (
	MediaRows   MediaType = 1
	MediaSQLite MediaType = 2
)

func (m MediaType) String() string {
	switch m {
	case MediaRows:
		return "rows"
	case MediaSQLite:
		return "sqlite"
	}
	return "unknown"
}

// SegmentRef is the SEGMENT_REF frame (§5.4): a bootstrap segment descriptor.
type SegmentRef struct {
	SegmentID     string
	MediaType     MediaType
	Table         string
	ByteLength    int64
	RowCount      int64
	AsOfCommitSeq int64
	ScopeDigest   string
	RowCursor     *string
	NextRowCursor *string
	// URL is a short-lived signed URL, or nil.
	URL *string
	// URLExpiresAtMs is on the wire iff URL is set.
	URLExpiresAtMs int64
}

// Type implements Frame.
func (*SegmentRef) Type() FrameType { return FrameSegmentRef }

func (f *SegmentRef) appendPayload(w *writer, _ uint16) {
	if f.MediaType != MediaRows && f.MediaType != MediaSQLite {
		w.fail("SEGMENT_REF.mediaType %d", f.MediaType)
	}
	w.str("SEGMENT_REF.segmentId", f.SegmentID)
	w.u8(byte(f.MediaType))
	w.str("SEGMENT_REF.table", f.Table)
	w.i64("SEGMENT_REF.byteLength", f.ByteLength)
	w.i64("SEGMENT_REF.rowCount", f.RowCount)
	w.i64("SEGMENT_REF.asOfCommitSeq", f.AsOfCommitSeq)
	w.str("SEGMENT_REF.scopeDigest", f.ScopeDigest)
	w.optStr("SEGMENT_REF.rowCursor", f.RowCursor)
	w.optStr("SEGMENT_REF.nextRowCursor", f.NextRowCursor)
	w.optStr("SEGMENT_REF.url", f.URL)
	if f.URL != nil {
		w.u8(1)
		w.i64("SEGMENT_REF.urlExpiresAtMs", f.URLExpiresAtMs)
	} else {
		w.u8(0)
	}
}

func decodeSegmentRef(r *reader) *SegmentRef {
	f := &SegmentRef{}
	f.SegmentID = r.str("SEGMENT_REF.segmentId")
	f.MediaType = MediaType(r.u8("SEGMENT_REF.mediaType"))
	if r.err == nil && f.MediaType != MediaRows && f.MediaType != MediaSQLite {
		r.fail("SEGMENT_REF.mediaType byte %d", f.MediaType)
	}
	f.Table = r.str("SEGMENT_REF.table")
	f.ByteLength = r.i64("SEGMENT_REF.byteLength")
	f.RowCount = r.i64("SEGMENT_REF.rowCount")
	f.AsOfCommitSeq = r.i64("SEGMENT_REF.asOfCommitSeq")
	f.ScopeDigest = r.str("SEGMENT_REF.scopeDigest")
	f.RowCursor = r.optStr("SEGMENT_REF.rowCursor")
	f.NextRowCursor = r.optStr("SEGMENT_REF.nextRowCursor")
	f.URL = r.optStr("SEGMENT_REF.url")
	hasExpiry := r.present("SEGMENT_REF.urlExpiresAtMs")
	if hasExpiry {
		f.URLExpiresAtMs = r.i64("SEGMENT_REF.urlExpiresAtMs")
	}
	if r.err == nil && hasExpiry != (f.URL != nil) {
		r.fail("SEGMENT_REF.urlExpiresAtMs must be present iff url is")
	}
	return f
}

// SegmentInline is the SEGMENT_INLINE frame (§5.7): one complete SSG2 rows
// segment, kept as raw bytes.
type SegmentInline struct {
	Payload []byte
}

// Type implements Frame.
func (*SegmentInline) Type() FrameType { return FrameSegmentInline }

func (f *SegmentInline) appendPayload(w *writer, _ uint16) {
	if err := ValidateSegment(f.Payload); err != nil {
		w.fail("SEGMENT_INLINE: %v", err)
	}
	w.b = append(w.b, f.Payload...)
}

func decodeSegmentInline(r *reader) *SegmentInline {
	payload := r.take(r.remaining(), "SEGMENT_INLINE")
	if err := ValidateSegment(payload); err != nil {
		r.fail("SEGMENT_INLINE payload is not a valid rows segment: %v", err)
	}
	return &SegmentInline{Payload: payload}
}
