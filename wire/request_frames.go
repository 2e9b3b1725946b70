package wire

// ReqHeader is the REQ_HEADER frame (§1.5), first in every request.
type ReqHeader struct {
	// ClientID is the stable per-device identifier, non-empty.
	ClientID string
	// SchemaVersion is the client's generated schema version, ≥ 1.
	SchemaVersion int32
	// LogEpoch is the partition log identity the client last accepted
	// (§2.1); nil requests epoch acquisition. Wire version 1 has no such
	// field and always decodes nil.
	LogEpoch *string
}

// Type implements Frame.
func (*ReqHeader) Type() FrameType { return FrameReqHeader }

func (f *ReqHeader) appendPayload(w *writer, version uint16) {
	w.str("REQ_HEADER.clientId", f.ClientID)
	w.i32(f.SchemaVersion)
	if version >= Version2 {
		w.optStr("REQ_HEADER.logEpoch", f.LogEpoch)
	} else if f.LogEpoch != nil {
		w.fail("REQ_HEADER.logEpoch needs wire version 2 or later")
	}
	if f.ClientID == "" {
		w.fail("REQ_HEADER.clientId must be non-empty")
	}
	if f.SchemaVersion < 1 {
		w.fail("REQ_HEADER.schemaVersion must be at least 1")
	}
}

func decodeReqHeader(r *reader, version uint16) *ReqHeader {
	f := &ReqHeader{}
	f.ClientID = r.str("REQ_HEADER.clientId")
	if r.err == nil && f.ClientID == "" {
		r.fail("REQ_HEADER.clientId must be non-empty")
	}
	f.SchemaVersion = r.i32("REQ_HEADER.schemaVersion")
	if r.err == nil && f.SchemaVersion < 1 {
		r.fail("REQ_HEADER.schemaVersion %d must be at least 1", f.SchemaVersion)
	}
	if version >= Version2 {
		f.LogEpoch = r.optStr("REQ_HEADER.logEpoch")
	}
	return f
}

// PushCommit is the PUSH_COMMIT frame (§6.1): one client commit.
type PushCommit struct {
	// ClientCommitID is the idempotency key, non-empty.
	ClientCommitID string
	// Operations holds at least one operation.
	Operations []Operation
}

// Operation is one operation record of a PUSH_COMMIT.
type Operation struct {
	Table string
	RowID string
	Op    Op
	// BaseVersion is the optimistic-concurrency token; nil is
	// last-writer-wins. A delete may carry one; the server ignores it.
	BaseVersion *int64
	// Payload is the row for an upsert (a sparse row in wire version 3, a
	// full row before) and nil for a delete. The envelope codec carries it
	// as opaque bytes.
	Payload []byte
}

// Type implements Frame.
func (*PushCommit) Type() FrameType { return FramePushCommit }

func (f *PushCommit) appendPayload(w *writer, _ uint16) {
	if f.ClientCommitID == "" {
		w.fail("PUSH_COMMIT.clientCommitId must be non-empty")
	}
	if len(f.Operations) == 0 {
		w.fail("PUSH_COMMIT must carry at least one operation")
	}
	w.str("PUSH_COMMIT.clientCommitId", f.ClientCommitID)
	w.count("PUSH_COMMIT.operations", len(f.Operations))
	for i := range f.Operations {
		op := &f.Operations[i]
		w.str("operation.table", op.Table)
		w.str("operation.rowId", op.RowID)
		switch op.Op {
		case OpUpsert:
			if op.Payload == nil {
				w.fail("upsert operation needs a payload")
			}
		case OpDelete:
			if op.Payload != nil {
				w.fail("delete operation must not carry a payload")
			}
		default:
			w.fail("operation op %d", op.Op)
		}
		w.u8(byte(op.Op))
		w.optI64("operation.baseVersion", op.BaseVersion)
		w.optBytes("operation.payload", op.Payload)
	}
}

func decodePushCommit(r *reader) (*PushCommit, *DecodeError) {
	f := &PushCommit{}
	f.ClientCommitID = r.str("PUSH_COMMIT.clientCommitId")
	if r.err == nil && f.ClientCommitID == "" {
		r.fail("PUSH_COMMIT.clientCommitId must be non-empty")
	}
	// An operation is at least 4+4+1+1+1 bytes.
	n := r.length("PUSH_COMMIT.operations", 11)
	if r.err == nil && n == 0 {
		return nil, &DecodeError{Code: CodeEmptyCommit, Reason: "PUSH_COMMIT carries no operations"}
	}
	f.Operations = make([]Operation, n)
	for i := range f.Operations {
		op := &f.Operations[i]
		op.Table = r.str("operation.table")
		op.RowID = r.str("operation.rowId")
		op.Op = decodeOp(r, "operation.op")
		op.BaseVersion = r.optI64("operation.baseVersion")
		op.Payload = r.optBytes("operation.payload")
		if r.err != nil {
			break
		}
		if op.Op == OpUpsert && op.Payload == nil {
			r.fail("upsert operation %d has no payload", i)
		} else if op.Op == OpDelete && op.Payload != nil {
			r.fail("delete operation %d carries a payload", i)
		}
	}
	return f, nil
}

// Accept bits of PULL_HEADER (§4.2).
const (
	AcceptInlineRows   uint8 = 1 << 0
	AcceptExternalRows uint8 = 1 << 1
	AcceptSQLite       uint8 = 1 << 2
	AcceptSignedURLs   uint8 = 1 << 3
)

// PullHeader is the PULL_HEADER frame (§4.2). Zero limits ask for the
// server's defaults; the server clamps the rest.
type PullHeader struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	// Accept is the segment capability bitmask; bits 4–7 must be zero.
	Accept uint8
}

// Type implements Frame.
func (*PullHeader) Type() FrameType { return FramePullHeader }

func (f *PullHeader) appendPayload(w *writer, _ uint16) {
	if f.Accept&0xF0 != 0 {
		w.fail("PULL_HEADER.accept bits 4-7 must be zero")
	}
	w.i32(f.LimitCommits)
	w.i32(f.LimitSnapshotRows)
	w.i32(f.MaxSnapshotPages)
	w.u8(f.Accept)
}

func decodePullHeader(r *reader) *PullHeader {
	f := &PullHeader{}
	f.LimitCommits = r.i32("PULL_HEADER.limitCommits")
	f.LimitSnapshotRows = r.i32("PULL_HEADER.limitSnapshotRows")
	f.MaxSnapshotPages = r.i32("PULL_HEADER.maxSnapshotPages")
	f.Accept = r.u8("PULL_HEADER.accept")
	if r.err == nil && f.Accept&0xF0 != 0 {
		r.fail("PULL_HEADER.accept 0x%02x sets bits 4-7", f.Accept)
	}
	return f
}

// Subscription is the SUBSCRIPTION frame (§4.3).
type Subscription struct {
	ID     string
	Table  string
	Scopes ScopeMap
	// Params holds host-opaque snapshot parameters as raw JSON text, or nil.
	Params *string
	// Cursor is the last fully applied commitSeq; -1 means never synced.
	Cursor int64
	// BootstrapState is the resume token of a previous SUB_END, raw JSON.
	BootstrapState *string
}

// Type implements Frame.
func (*Subscription) Type() FrameType { return FrameSubscription }

func (f *Subscription) appendPayload(w *writer, _ uint16) {
	w.str("SUBSCRIPTION.id", f.ID)
	w.str("SUBSCRIPTION.table", f.Table)
	appendScopeMap(w, "SUBSCRIPTION.scopes", f.Scopes)
	w.optJSON("SUBSCRIPTION.params", f.Params)
	w.i64("SUBSCRIPTION.cursor", f.Cursor)
	w.optJSON("SUBSCRIPTION.bootstrapState", f.BootstrapState)
}

func decodeSubscription(r *reader) *Subscription {
	f := &Subscription{}
	f.ID = r.str("SUBSCRIPTION.id")
	f.Table = r.str("SUBSCRIPTION.table")
	f.Scopes = decodeScopeMap(r, "SUBSCRIPTION.scopes")
	f.Params = r.optJSON("SUBSCRIPTION.params")
	f.Cursor = r.i64("SUBSCRIPTION.cursor")
	f.BootstrapState = r.optJSON("SUBSCRIPTION.bootstrapState")
	return f
}
