package wire

// PushStatus is the status of a PUSH_RESULT.
type PushStatus uint8

// Push result statuses (§6.3).
const (
	PushApplied  PushStatus = 1
	PushCached   PushStatus = 2
	PushRejected PushStatus = 3
)

func (s PushStatus) String() string {
	switch s {
	case PushApplied:
		return "applied"
	case PushCached:
		return "cached"
	case PushRejected:
		return "rejected"
	}
	return "unknown"
}

// OpStatus is the status of one result record of a PUSH_RESULT.
type OpStatus uint8

// Result record statuses (§6.3).
const (
	OpApplied  OpStatus = 1
	OpConflict OpStatus = 2
	OpError    OpStatus = 3
)

func (s OpStatus) String() string {
	switch s {
	case OpApplied:
		return "applied"
	case OpConflict:
		return "conflict"
	case OpError:
		return "error"
	}
	return "unknown"
}

// PushResult is the PUSH_RESULT frame (§6.3), one per PUSH_COMMIT.
type PushResult struct {
	ClientCommitID string
	Status         PushStatus
	// CommitSeq is on the wire only for applied and cached results.
	CommitSeq int64
	Results   []OpResult
}

// OpResult is one result record. Which fields are on the wire depends on
// Status: none for applied; Code, Message, ServerVersion, ServerRow and (in
// wire version 3) ConflictColumns for conflict; Code, Message and Retryable
// for error.
type OpResult struct {
	OpIndex       int32
	Status        OpStatus
	Code          string
	Message       string
	ServerVersion int64
	// ServerRow is the current row in the full-row codec.
	ServerRow []byte
	// ConflictColumns is the bitmap of contended columns (version 3).
	ConflictColumns []byte
	Retryable       bool
}

// Type implements Frame.
func (*PushResult) Type() FrameType { return FramePushResult }

func (f *PushResult) appendPayload(w *writer, version uint16) {
	w.str("PUSH_RESULT.clientCommitId", f.ClientCommitID)
	w.u8(byte(f.Status))
	switch f.Status {
	case PushApplied, PushCached:
		w.u8(1)
		w.i64("PUSH_RESULT.commitSeq", f.CommitSeq)
	case PushRejected:
		w.u8(0)
	default:
		w.fail("PUSH_RESULT.status %d", f.Status)
	}
	w.count("PUSH_RESULT.results", len(f.Results))
	for i := range f.Results {
		res := &f.Results[i]
		w.i32(res.OpIndex)
		w.u8(byte(res.Status))
		switch res.Status {
		case OpApplied:
		case OpConflict:
			w.str("conflict.code", res.Code)
			w.str("conflict.message", res.Message)
			w.i64("conflict.serverVersion", res.ServerVersion)
			w.bytes("conflict.serverRow", res.ServerRow)
			if version >= Version3 {
				w.bytes("conflict.conflictColumns", res.ConflictColumns)
			} else if res.ConflictColumns != nil {
				w.fail("conflictColumns needs wire version 3")
			}
		case OpError:
			w.str("error.code", res.Code)
			w.str("error.message", res.Message)
			w.boolean(res.Retryable)
		default:
			w.fail("result record status %d", res.Status)
		}
	}
}

func decodePushResult(r *reader, version uint16) *PushResult {
	f := &PushResult{}
	f.ClientCommitID = r.str("PUSH_RESULT.clientCommitId")
	f.Status = PushStatus(r.u8("PUSH_RESULT.status"))
	if r.err == nil && (f.Status < PushApplied || f.Status > PushRejected) {
		r.fail("PUSH_RESULT.status byte %d", f.Status)
	}
	hasSeq := r.present("PUSH_RESULT.commitSeq")
	if hasSeq {
		f.CommitSeq = r.i64("PUSH_RESULT.commitSeq")
	}
	if r.err == nil && hasSeq != (f.Status != PushRejected) {
		r.fail("PUSH_RESULT.commitSeq must be present iff status is applied or cached")
	}
	n := r.length("PUSH_RESULT.results", 5)
	f.Results = make([]OpResult, n)
	for i := range f.Results {
		res := &f.Results[i]
		res.OpIndex = r.i32("result.opIndex")
		res.Status = OpStatus(r.u8("result.status"))
		switch res.Status {
		case OpApplied:
		case OpConflict:
			res.Code = r.str("conflict.code")
			res.Message = r.str("conflict.message")
			res.ServerVersion = r.i64("conflict.serverVersion")
			res.ServerRow = nonNil(r.bytes("conflict.serverRow"))
			if version >= Version3 {
				res.ConflictColumns = nonNil(r.bytes("conflict.conflictColumns"))
			}
		case OpError:
			res.Code = r.str("error.code")
			res.Message = r.str("error.message")
			res.Retryable = r.boolean("error.retryable")
		default:
			r.fail("result record status byte %d", res.Status)
		}
		if r.err != nil {
			break
		}
	}
	return f
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// PushResultDetails is the PUSH_RESULT_DETAILS companion frame (§6.3.1).
type PushResultDetails struct {
	ClientCommitID string
	Entries        []DetailEntry
}

// DetailEntry is one entry of PUSH_RESULT_DETAILS.
type DetailEntry struct {
	OpIndex int32
	// DetailsJSON is the bounded details object (§6.3.1) as JSON text.
	DetailsJSON string
}

// Type implements Frame.
func (*PushResultDetails) Type() FrameType { return FramePushResultDetails }

func (f *PushResultDetails) appendPayload(w *writer, _ uint16) {
	if f.ClientCommitID == "" {
		w.fail("PUSH_RESULT_DETAILS.clientCommitId must be non-empty")
	}
	if len(f.Entries) == 0 {
		w.fail("PUSH_RESULT_DETAILS must carry at least one entry")
	}
	w.str("PUSH_RESULT_DETAILS.clientCommitId", f.ClientCommitID)
	w.count("PUSH_RESULT_DETAILS.entries", len(f.Entries))
	for i, e := range f.Entries {
		if e.OpIndex < 0 || duplicateOpIndex(f.Entries[:i], e.OpIndex) {
			w.fail("PUSH_RESULT_DETAILS opIndex %d negative or repeated", e.OpIndex)
		}
		if err := ValidateRejectionDetails(e.DetailsJSON); err != nil {
			w.fail("PUSH_RESULT_DETAILS: %v", err)
		}
		w.i32(e.OpIndex)
		w.str("detailsJson", e.DetailsJSON)
	}
}

func duplicateOpIndex(prev []DetailEntry, idx int32) bool {
	for _, p := range prev {
		if p.OpIndex == idx {
			return true
		}
	}
	return false
}

func decodePushResultDetails(r *reader) *PushResultDetails {
	f := &PushResultDetails{}
	f.ClientCommitID = r.str("PUSH_RESULT_DETAILS.clientCommitId")
	if r.err == nil && f.ClientCommitID == "" {
		r.fail("PUSH_RESULT_DETAILS.clientCommitId must be non-empty")
	}
	n := r.length("PUSH_RESULT_DETAILS.entries", 8)
	if r.err == nil && n == 0 {
		r.fail("PUSH_RESULT_DETAILS must carry at least one entry")
	}
	f.Entries = make([]DetailEntry, n)
	for i := range f.Entries {
		e := &f.Entries[i]
		e.OpIndex = r.i32("detail.opIndex")
		if r.err == nil && (e.OpIndex < 0 || duplicateOpIndex(f.Entries[:i], e.OpIndex)) {
			r.fail("PUSH_RESULT_DETAILS opIndex %d negative or repeated", e.OpIndex)
		}
		e.DetailsJSON = r.str("detail.detailsJson")
		if r.err != nil {
			break
		}
		if err := ValidateRejectionDetails(e.DetailsJSON); err != nil {
			r.fail("PUSH_RESULT_DETAILS entry %d: %v", i, err)
		}
	}
	return f
}
