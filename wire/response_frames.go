package wire

// RespHeader is the RESP_HEADER frame (§1.6), first in every response.
type RespHeader struct {
	// RequiredSchemaVersion, when set, says the client's schema version is
	// not served (the schema-floor response).
	RequiredSchemaVersion *int32
	// LatestSchemaVersion is the newest schema version the server knows.
	LatestSchemaVersion *int32
	// LogEpoch is the partition log identity (wire version 2 and later).
	LogEpoch string
	// ResetRequired asks the client to run the log reset (version 2+).
	ResetRequired bool
}

// Type implements Frame.
func (*RespHeader) Type() FrameType { return FrameRespHeader }

func (f *RespHeader) appendPayload(w *writer, version uint16) {
	w.optI32(f.RequiredSchemaVersion)
	w.optI32(f.LatestSchemaVersion)
	if version >= Version2 {
		w.str("RESP_HEADER.logEpoch", f.LogEpoch)
		w.boolean(f.ResetRequired)
	} else if f.LogEpoch != "" || f.ResetRequired {
		w.fail("RESP_HEADER epoch fields need wire version 2 or later")
	}
}

func decodeRespHeader(r *reader, version uint16) *RespHeader {
	f := &RespHeader{}
	f.RequiredSchemaVersion = r.optI32("RESP_HEADER.requiredSchemaVersion")
	f.LatestSchemaVersion = r.optI32("RESP_HEADER.latestSchemaVersion")
	if version >= Version2 {
		f.LogEpoch = r.str("RESP_HEADER.logEpoch")
		f.ResetRequired = r.boolean("RESP_HEADER.resetRequired")
	}
	return f
}

// Lease is the LEASE frame (§7.3.2).
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

// Type implements Frame.
func (*Lease) Type() FrameType { return FrameLease }

func (f *Lease) appendPayload(w *writer, _ uint16) {
	w.str("LEASE.leaseId", f.LeaseID)
	w.i64("LEASE.expiresAtMs", f.ExpiresAtMs)
}

func decodeLease(r *reader) *Lease {
	return &Lease{LeaseID: r.str("LEASE.leaseId"), ExpiresAtMs: r.i64("LEASE.expiresAtMs")}
}

// SubStatus is the status of a SUB_START.
type SubStatus uint8

// Subscription statuses (§4.4).
const (
	SubActive  SubStatus = 1
	SubRevoked SubStatus = 2
	SubReset   SubStatus = 3
)

func (s SubStatus) String() string {
	switch s {
	case SubActive:
		return "active"
	case SubRevoked:
		return "revoked"
	case SubReset:
		return "reset"
	}
	return "unknown"
}

// SubStart is the SUB_START frame (§4.4) that opens a subscription section.
type SubStart struct {
	ID              string
	Status          SubStatus
	ReasonCode      string
	EffectiveScopes ScopeMap
	Bootstrap       bool
}

// Type implements Frame.
func (*SubStart) Type() FrameType { return FrameSubStart }

func (f *SubStart) appendPayload(w *writer, _ uint16) {
	if f.Status < SubActive || f.Status > SubReset {
		w.fail("SUB_START.status %d", f.Status)
	}
	w.str("SUB_START.id", f.ID)
	w.u8(byte(f.Status))
	w.str("SUB_START.reasonCode", f.ReasonCode)
	appendScopeMap(w, "SUB_START.effectiveScopes", f.EffectiveScopes)
	w.boolean(f.Bootstrap)
}

func decodeSubStart(r *reader) *SubStart {
	f := &SubStart{}
	f.ID = r.str("SUB_START.id")
	f.Status = SubStatus(r.u8("SUB_START.status"))
	if r.err == nil && (f.Status < SubActive || f.Status > SubReset) {
		r.fail("SUB_START.status byte %d", f.Status)
	}
	f.ReasonCode = r.str("SUB_START.reasonCode")
	f.EffectiveScopes = decodeScopeMap(r, "SUB_START.effectiveScopes")
	f.Bootstrap = r.boolean("SUB_START.bootstrap")
	return f
}

// SubEnd is the SUB_END frame (§4.4) that closes a subscription section.
type SubEnd struct {
	NextCursor int64
	// BootstrapState is present iff the bootstrap is incomplete (raw JSON).
	BootstrapState *string
}

// Type implements Frame.
func (*SubEnd) Type() FrameType { return FrameSubEnd }

func (f *SubEnd) appendPayload(w *writer, _ uint16) {
	w.i64("SUB_END.nextCursor", f.NextCursor)
	w.optJSON("SUB_END.bootstrapState", f.BootstrapState)
}

func decodeSubEnd(r *reader) *SubEnd {
	return &SubEnd{
		NextCursor:     r.i64("SUB_END.nextCursor"),
		BootstrapState: r.optJSON("SUB_END.bootstrapState"),
	}
}

// Commit is the COMMIT frame (§4.5): one commit of the log, filtered to the
// subscription's effective scopes.
type Commit struct {
	CommitSeq   int64
	CreatedAtMs int64
	ActorID     string
	// Tables is the frame-local table dictionary.
	Tables  []string
	Changes []Change
}

// Change is one change record of a COMMIT.
type Change struct {
	// TableIndex indexes the frame's Tables.
	TableIndex uint16
	RowID      string
	Op         Op
	// RowVersion is the row's version after an upsert; it is on the wire
	// only for upserts.
	RowVersion int64
	Scopes     StoredScopes
	// Row is the full-row codec encoding for an upsert, nil for a delete.
	Row []byte
}

// Type implements Frame.
func (*Commit) Type() FrameType { return FrameCommit }

func (f *Commit) appendPayload(w *writer, _ uint16) {
	w.i64("COMMIT.commitSeq", f.CommitSeq)
	w.i64("COMMIT.createdAtMs", f.CreatedAtMs)
	w.str("COMMIT.actorId", f.ActorID)
	w.strList("COMMIT.tables", f.Tables)
	w.count("COMMIT.changes", len(f.Changes))
	for i := range f.Changes {
		c := &f.Changes[i]
		if int(c.TableIndex) >= len(f.Tables) {
			w.fail("change tableIndex %d out of range", c.TableIndex)
		}
		w.u16(c.TableIndex)
		w.str("change.rowId", c.RowID)
		w.u8(byte(c.Op))
		switch c.Op {
		case OpUpsert:
			if c.Row == nil {
				w.fail("upsert change needs a row")
			}
			w.u8(1)
			w.i64("change.rowVersion", c.RowVersion)
		case OpDelete:
			if c.Row != nil {
				w.fail("delete change must not carry a row")
			}
			w.u8(0)
		default:
			w.fail("change op %d", c.Op)
		}
		appendStoredScopes(w, "change.scopes", c.Scopes)
		w.optBytes("change.row", c.Row)
	}
}

func decodeCommit(r *reader) *Commit {
	f := &Commit{}
	decodeCommitInto(r, f)
	return f
}

// decodeCommitInto decodes a COMMIT payload into f, reusing the backing
// arrays of its Tables, Changes and their Scopes (a zero f allocates them
// as decodeCommit always did).
func decodeCommitInto(r *reader, f *Commit) {
	f.CommitSeq = r.i64("COMMIT.commitSeq")
	f.CreatedAtMs = r.i64("COMMIT.createdAtMs")
	f.ActorID = r.str("COMMIT.actorId")
	f.Tables = strListInto(r, "COMMIT.tables", f.Tables)
	// A change is at least 2+4+1+1+4+1 bytes.
	n := r.length("COMMIT.changes", 13)
	if f.Changes == nil || cap(f.Changes) < n {
		f.Changes = make([]Change, n)
	} else {
		f.Changes = f.Changes[:n]
	}
	for i := range f.Changes {
		c := &f.Changes[i]
		*c = Change{Scopes: c.Scopes}
		c.TableIndex = r.u16("change.tableIndex")
		if r.err == nil && int(c.TableIndex) >= len(f.Tables) {
			r.fail("change tableIndex %d out of range of %d tables", c.TableIndex, len(f.Tables))
		}
		c.RowID = r.str("change.rowId")
		c.Op = decodeOp(r, "change.op")
		hasVersion := r.present("change.rowVersion")
		if hasVersion {
			c.RowVersion = r.i64("change.rowVersion")
		}
		c.Scopes = decodeStoredScopesInto(r, "change.scopes", c.Scopes)
		c.Row = r.optBytes("change.row")
		if r.err != nil {
			break
		}
		upsert := c.Op == OpUpsert
		if hasVersion != upsert || (c.Row != nil) != upsert {
			r.fail("change %d: rowVersion and row must be present iff upsert", i)
		}
	}
}

// ErrorFrame is the in-band ERROR frame (§1.6); only END may follow it.
type ErrorFrame struct {
	Code              string
	Message           string
	Category          string
	Retryable         bool
	RecommendedAction string
	// Details is raw JSON text, or nil.
	Details *string
}

// Type implements Frame.
func (*ErrorFrame) Type() FrameType { return FrameError }

func (f *ErrorFrame) appendPayload(w *writer, _ uint16) {
	w.str("ERROR.code", f.Code)
	w.str("ERROR.message", f.Message)
	w.str("ERROR.category", f.Category)
	w.boolean(f.Retryable)
	w.str("ERROR.recommendedAction", f.RecommendedAction)
	w.optJSON("ERROR.details", f.Details)
}

func decodeErrorFrame(r *reader) *ErrorFrame {
	f := &ErrorFrame{}
	f.Code = r.str("ERROR.code")
	f.Message = r.str("ERROR.message")
	f.Category = r.str("ERROR.category")
	f.Retryable = r.boolean("ERROR.retryable")
	f.RecommendedAction = r.str("ERROR.recommendedAction")
	f.Details = r.optJSON("ERROR.details")
	return f
}
