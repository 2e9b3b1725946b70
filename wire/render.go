package wire

import (
	"encoding/base64"
	"encoding/json"
)

// RenderMessage returns the canonical JSON debug rendering of a message
// (§11.1). It is a developer and test tool; no production path parses it.
func RenderMessage(m *Message) ([]byte, error) {
	doc := newJSONObject(4)
	doc.add("magic", "SSP2")
	doc.add("wireVersion", m.Version)
	doc.add("msgKind", m.Kind.String())
	frames := make([]any, 0, len(m.Frames))
	for _, f := range m.Frames {
		frames = append(frames, renderFrame(f, m.Version))
	}
	doc.add("frames", frames)
	return json.Marshal(doc)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func rawJSON(s string) json.RawMessage { return json.RawMessage(s) }

func renderScopeMap(m ScopeMap) *jsonObject {
	o := newJSONObject(len(m))
	for _, e := range m {
		vals := e.Values
		if vals == nil {
			vals = []string{}
		}
		o.add(e.Key, vals)
	}
	return o
}

func renderFrame(f Frame, version uint16) any {
	o := newJSONObject(12)
	o.add("type", f.Type().Name())
	switch f := f.(type) {
	case *ReqHeader:
		o.add("clientId", f.ClientID)
		o.add("schemaVersion", f.SchemaVersion)
		if f.LogEpoch != nil {
			o.add("logEpoch", *f.LogEpoch)
		}
	case *PushCommit:
		o.add("clientCommitId", f.ClientCommitID)
		ops := make([]any, len(f.Operations))
		for i, op := range f.Operations {
			oo := newJSONObject(5)
			oo.add("table", op.Table)
			oo.add("rowId", op.RowID)
			oo.add("op", op.Op.String())
			if op.BaseVersion != nil {
				oo.add("baseVersion", *op.BaseVersion)
			}
			if op.Payload != nil {
				oo.add("payload", b64(op.Payload))
			}
			ops[i] = oo
		}
		o.add("operations", ops)
	case *PullHeader:
		o.add("limitCommits", f.LimitCommits)
		o.add("limitSnapshotRows", f.LimitSnapshotRows)
		o.add("maxSnapshotPages", f.MaxSnapshotPages)
		o.add("accept", f.Accept)
	case *Subscription:
		o.add("id", f.ID)
		o.add("table", f.Table)
		o.add("scopes", renderScopeMap(f.Scopes))
		if f.Params != nil {
			o.add("params", rawJSON(*f.Params))
		}
		o.add("cursor", f.Cursor)
		if f.BootstrapState != nil {
			o.add("bootstrapState", rawJSON(*f.BootstrapState))
		}
	case *RespHeader:
		if f.RequiredSchemaVersion != nil {
			o.add("requiredSchemaVersion", *f.RequiredSchemaVersion)
		}
		if f.LatestSchemaVersion != nil {
			o.add("latestSchemaVersion", *f.LatestSchemaVersion)
		}
		if version >= Version2 {
			o.add("logEpoch", f.LogEpoch)
			o.add("resetRequired", f.ResetRequired)
		}
	case *Lease:
		o.add("leaseId", f.LeaseID)
		o.add("expiresAtMs", f.ExpiresAtMs)
	case *PushResult:
		renderPushResult(o, f, version)
	case *PushResultDetails:
		o.add("clientCommitId", f.ClientCommitID)
		entries := make([]any, len(f.Entries))
		for i, e := range f.Entries {
			eo := newJSONObject(2)
			eo.add("opIndex", e.OpIndex)
			eo.add("details", rawJSON(e.DetailsJSON))
			entries[i] = eo
		}
		o.add("entries", entries)
	case *SubStart:
		o.add("id", f.ID)
		o.add("status", f.Status.String())
		o.add("reasonCode", f.ReasonCode)
		o.add("effectiveScopes", renderScopeMap(f.EffectiveScopes))
		o.add("bootstrap", f.Bootstrap)
	case *Commit:
		renderCommit(o, f)
	case *SegmentRef:
		renderSegmentRef(o, f)
	case *SegmentInline:
		o.add("payload", b64(f.Payload))
	case *SubEnd:
		o.add("nextCursor", f.NextCursor)
		if f.BootstrapState != nil {
			o.add("bootstrapState", rawJSON(*f.BootstrapState))
		}
	case *ErrorFrame:
		o.add("code", f.Code)
		o.add("message", f.Message)
		o.add("category", f.Category)
		o.add("retryable", f.Retryable)
		o.add("recommendedAction", f.RecommendedAction)
		if f.Details != nil {
			o.add("details", rawJSON(*f.Details))
		}
	case *Unknown:
		o.add("frameType", uint8(f.FrameType))
		o.add("payload", b64(f.Payload))
	}
	return o
}

func renderPushResult(o *jsonObject, f *PushResult, version uint16) {
	o.add("clientCommitId", f.ClientCommitID)
	o.add("status", f.Status.String())
	if f.Status != PushRejected {
		o.add("commitSeq", f.CommitSeq)
	}
	results := make([]any, len(f.Results))
	for i, r := range f.Results {
		ro := newJSONObject(7)
		ro.add("opIndex", r.OpIndex)
		ro.add("status", r.Status.String())
		switch r.Status {
		case OpConflict:
			ro.add("code", r.Code)
			ro.add("message", r.Message)
			ro.add("serverVersion", r.ServerVersion)
			ro.add("serverRow", b64(r.ServerRow))
			if version >= Version3 {
				ro.add("conflictColumns", b64(r.ConflictColumns))
			}
		case OpError:
			ro.add("code", r.Code)
			ro.add("message", r.Message)
			ro.add("retryable", r.Retryable)
		}
		results[i] = ro
	}
	o.add("results", results)
}

func renderCommit(o *jsonObject, f *Commit) {
	o.add("commitSeq", f.CommitSeq)
	o.add("createdAtMs", f.CreatedAtMs)
	o.add("actorId", f.ActorID)
	tables := f.Tables
	if tables == nil {
		tables = []string{}
	}
	o.add("tables", tables)
	changes := make([]any, len(f.Changes))
	for i, c := range f.Changes {
		co := newJSONObject(6)
		co.add("tableIndex", c.TableIndex)
		co.add("rowId", c.RowID)
		co.add("op", c.Op.String())
		if c.Op == OpUpsert {
			co.add("rowVersion", c.RowVersion)
		}
		scopes := newJSONObject(len(c.Scopes))
		for _, s := range c.Scopes {
			scopes.add(s.Key, s.Value)
		}
		co.add("scopes", scopes)
		if c.Row != nil {
			co.add("row", b64(c.Row))
		}
		changes[i] = co
	}
	o.add("changes", changes)
}

func renderSegmentRef(o *jsonObject, f *SegmentRef) {
	o.add("segmentId", f.SegmentID)
	o.add("mediaType", f.MediaType.String())
	o.add("table", f.Table)
	o.add("byteLength", f.ByteLength)
	o.add("rowCount", f.RowCount)
	o.add("asOfCommitSeq", f.AsOfCommitSeq)
	o.add("scopeDigest", f.ScopeDigest)
	if f.RowCursor != nil {
		o.add("rowCursor", *f.RowCursor)
	}
	if f.NextRowCursor != nil {
		o.add("nextRowCursor", *f.NextRowCursor)
	}
	if f.URL != nil {
		o.add("url", *f.URL)
		o.add("urlExpiresAtMs", f.URLExpiresAtMs)
	}
}
