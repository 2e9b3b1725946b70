package wire

// FrameType is the frameType byte of a frame (§1.2 registry).
type FrameType uint8

// The frame types of wire versions 1 to 3. No frame type changed between
// versions; versions differ only inside REQ_HEADER, RESP_HEADER and the
// conflict record of PUSH_RESULT.
const (
	FrameEnd               FrameType = 0x00 // both kinds, terminates a message
	FrameReqHeader         FrameType = 0x01 // request, §1.5
	FramePushCommit        FrameType = 0x02 // request, §6.1
	FramePullHeader        FrameType = 0x03 // request, §4.2
	FrameSubscription      FrameType = 0x04 // request, §4.3
	FrameRespHeader        FrameType = 0x10 // response, §1.6
	FramePushResult        FrameType = 0x11 // response, §6.3
	FrameSubStart          FrameType = 0x12 // response, §4.4
	FrameCommit            FrameType = 0x13 // response, §4.5
	FrameSegmentRef        FrameType = 0x14 // response, §5.4
	FrameSegmentInline     FrameType = 0x15 // response, §5.7
	FrameSubEnd            FrameType = 0x16 // response, §4.4
	FrameLease             FrameType = 0x19 // response, §7.3.2
	FramePushResultDetails FrameType = 0x1B // response, §6.3.1
	FrameError             FrameType = 0x1F // response, §1.6
)

// MsgKind is the msgKind byte of the envelope.
type MsgKind uint8

// The two message kinds.
const (
	KindRequest  MsgKind = 0x01
	KindResponse MsgKind = 0x02
)

func (k MsgKind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	}
	return "unknown"
}

// ContentType is the media type of SSP2 request and response bodies
// (§1.1), every wire version alike.
const ContentType = "application/vnd.syncular.sync.v2"

// Wire versions. A server answers in the version of the request.
const (
	Version1 uint16 = 1 // 0.15 line without log epochs
	Version2 uint16 = 2 // adds the partition log epoch to both headers
	Version3 uint16 = 3 // sparse push rows, conflictColumns (0.21 onward)
)

// SupportedVersion reports whether v is a wire version this package speaks.
func SupportedVersion(v uint16) bool { return v >= Version1 && v <= Version3 }

// kindOf returns the message kind a registered frame type belongs to, or 0
// for END and for types with no layout (unknown frames).
func kindOf(t FrameType) MsgKind {
	switch t {
	case FrameReqHeader, FramePushCommit, FramePullHeader, FrameSubscription:
		return KindRequest
	case FrameRespHeader, FramePushResult, FrameSubStart, FrameCommit,
		FrameSegmentRef, FrameSegmentInline, FrameSubEnd, FrameLease,
		FramePushResultDetails, FrameError:
		return KindResponse
	}
	return 0
}

// Name returns the spec name of a registered frame type, or "UNKNOWN".
func (t FrameType) Name() string {
	switch t {
	case FrameEnd:
		return "END"
	case FrameReqHeader:
		return "REQ_HEADER"
	case FramePushCommit:
		return "PUSH_COMMIT"
	case FramePullHeader:
		return "PULL_HEADER"
	case FrameSubscription:
		return "SUBSCRIPTION"
	case FrameRespHeader:
		return "RESP_HEADER"
	case FramePushResult:
		return "PUSH_RESULT"
	case FrameSubStart:
		return "SUB_START"
	case FrameCommit:
		return "COMMIT"
	case FrameSegmentRef:
		return "SEGMENT_REF"
	case FrameSegmentInline:
		return "SEGMENT_INLINE"
	case FrameSubEnd:
		return "SUB_END"
	case FrameLease:
		return "LEASE"
	case FramePushResultDetails:
		return "PUSH_RESULT_DETAILS"
	case FrameError:
		return "ERROR"
	}
	return "UNKNOWN"
}

// Frame is one decoded frame. The concrete types are the pointer types of
// this package named after the frames (*ReqHeader, *Commit, ...) and
// *Unknown for a frame type with no layout, preserved byte for byte.
type Frame interface {
	// Type returns the frame's frameType byte.
	Type() FrameType
	// appendPayload appends the frame payload in the given wire version.
	appendPayload(w *writer, version uint16)
}

// Unknown is a frame whose type has no layout in the message's wire
// version. Decoders keep it in place so that re-encoding reproduces the
// input (§1.2 rule 2); encoders refuse one whose type is registered.
type Unknown struct {
	FrameType FrameType
	Payload   []byte
}

// Type implements Frame.
func (f *Unknown) Type() FrameType { return f.FrameType }

func (f *Unknown) appendPayload(w *writer, _ uint16) { w.b = append(w.b, f.Payload...) }

// Op is the operation of a push operation or a change.
type Op uint8

// Operation codes (§4.5, §6.1).
const (
	OpUpsert Op = 1
	OpDelete Op = 2
)

func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	}
	return "unknown"
}

func decodeOp(r *reader, what string) Op {
	b := Op(r.u8(what))
	if r.err == nil && b != OpUpsert && b != OpDelete {
		r.fail("%s: op byte %d", what, b)
	}
	return b
}

// ScopeValues is one entry of a requested or effective scope map: a scope
// variable and its values.
type ScopeValues struct {
	Key    string
	Values []string
}

// ScopeMap is a map of scope variable to value list, kept as entries in
// canonical key order (CompareKeys), the order it has on the wire.
type ScopeMap []ScopeValues

// StoredScope is one entry of a change's stored scopes: variable and value.
type StoredScope struct {
	Key   string
	Value string
}

// StoredScopes is a map of scope variable to value in canonical key order.
type StoredScopes []StoredScope

func decodeScopeMap(r *reader, what string) ScopeMap {
	n := r.length(what, 8)
	m := make(ScopeMap, n)
	for i := range m {
		m[i].Key = r.str(what)
		if i > 0 && r.err == nil && CompareKeys(m[i-1].Key, m[i].Key) >= 0 {
			r.fail("%s: map keys out of order or duplicate at %q", what, m[i].Key)
		}
		m[i].Values = r.strList(what)
	}
	return m
}

func appendScopeMap(w *writer, what string, m ScopeMap) {
	w.count(what, len(m))
	for i, e := range m {
		if i > 0 && CompareKeys(m[i-1].Key, e.Key) >= 0 {
			w.fail("%s: map keys out of order or duplicate at %q", what, e.Key)
		}
		w.str(what, e.Key)
		w.strList(what, e.Values)
	}
}

// decodeStoredScopesInto decodes a change's stored scopes, reusing dst's
// backing array when it is large enough.
func decodeStoredScopesInto(r *reader, what string, dst StoredScopes) StoredScopes {
	n := r.length(what, 8)
	m := dst
	if m == nil || cap(m) < n {
		m = make(StoredScopes, n)
	} else {
		m = m[:n]
	}
	for i := range m {
		m[i].Key = r.str(what)
		if i > 0 && r.err == nil && CompareKeys(m[i-1].Key, m[i].Key) >= 0 {
			r.fail("%s: map keys out of order or duplicate at %q", what, m[i].Key)
		}
		m[i].Value = r.str(what)
	}
	return m
}

func appendStoredScopes(w *writer, what string, m StoredScopes) {
	w.count(what, len(m))
	for i, e := range m {
		if i > 0 && CompareKeys(m[i-1].Key, e.Key) >= 0 {
			w.fail("%s: map keys out of order or duplicate at %q", what, e.Key)
		}
		w.str(what, e.Key)
		w.str(what, e.Value)
	}
}
