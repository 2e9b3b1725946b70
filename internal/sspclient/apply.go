package sspclient

import (
	"context"
	"fmt"
	"io"

	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// sentSub is what the request said about a subscription.
type sentSub struct {
	cursor  int64
	resumed bool // the request carried a resume token
}

// roundState applies one response as it streams (§1.4): each COMMIT frame
// and each segment block is applied whole, and a subscription's cursor and
// resume token are persisted only at its SUB_END.
type roundState struct {
	c       *Client
	version uint16
	res     *RoundResult
	sent    map[string]*Commit
	reqSubs map[string]sentSub

	open      *subscription // the subscription of the open section
	section   *Section
	fresh     bool // the open section is a fresh bootstrap (§5.6)
	segsSeen  int  // segments applied in the open section
	lastOutIx int  // index in res.Pushed of the last PUSH_RESULT
}

// read decodes and applies the response frame by frame. On a decode
// error, a truncated body or an ERROR frame it stops, leaving the open
// section unpersisted (§1.4 rule 5).
func (rs *roundState) read(ctx context.Context, d *wire.Decoder) error {
	v, _, err := d.Header()
	if err != nil {
		return fmt.Errorf("sspclient: response: %w", err)
	}
	if v != rs.version {
		return fmt.Errorf("sspclient: response wire version %d, request %d", v, rs.version)
	}
	for {
		f, err := d.Next()
		if err == io.EOF {
			return rs.finish()
		}
		if err != nil {
			return fmt.Errorf("sspclient: response: %w", err)
		}
		if err := rs.apply(ctx, f); err != nil {
			return err
		}
	}
}

func (rs *roundState) apply(ctx context.Context, f wire.Frame) error {
	switch f := f.(type) {
	case *wire.RespHeader:
		return rs.header(f)
	case *wire.PushResult:
		cm := rs.sent[f.ClientCommitID]
		if cm == nil {
			return fmt.Errorf("sspclient: PUSH_RESULT for unsent commit %q", f.ClientCommitID)
		}
		rs.c.mu.Lock()
		out := rs.c.settle(cm, f)
		rs.c.mu.Unlock()
		rs.res.Pushed = append(rs.res.Pushed, out)
		rs.lastOutIx = len(rs.res.Pushed) - 1
	case *wire.PushResultDetails:
		if len(rs.res.Pushed) > 0 && rs.res.Pushed[rs.lastOutIx].CommitID == f.ClientCommitID {
			rs.res.Pushed[rs.lastOutIx].Details = f.Entries
			rs.c.mu.Lock()
			if n := len(rs.c.outcomes); n > 0 && rs.c.outcomes[n-1].CommitID == f.ClientCommitID {
				rs.c.outcomes[n-1].Details = f.Entries
			}
			rs.c.mu.Unlock()
		}
	case *wire.SubStart:
		return rs.subStart(f)
	case *wire.Commit:
		return rs.commit(f)
	case *wire.SegmentInline:
		return rs.segment(nil, f.Payload)
	case *wire.SegmentRef:
		return rs.segmentRef(ctx, f)
	case *wire.SubEnd:
		return rs.subEnd(f)
	case *wire.ErrorFrame:
		pe := &syncerr.Error{Code: f.Code, Message: f.Message}
		if f.Details != nil {
			pe.Details = []byte(*f.Details)
		}
		return pe
	}
	return nil // LEASE and unknown frames
}

func (rs *roundState) header(h *wire.RespHeader) error {
	res := rs.res
	res.LogEpoch, res.ResetRequired = h.LogEpoch, h.ResetRequired
	res.RequiredSchemaVersion, res.LatestSchemaVersion = h.RequiredSchemaVersion, h.LatestSchemaVersion
	if rs.version < wire.Version2 || !h.ResetRequired {
		return nil
	}
	c := rs.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logEpoch != nil && *c.logEpoch != h.LogEpoch {
		c.resetReplica()
		res.EpochChanged = true
	}
	epoch := h.LogEpoch
	c.logEpoch = &epoch
	return nil
}

// finish runs after END: a schema-floor response is an error.
func (rs *roundState) finish() error {
	if h := rs.res; h.RequiredSchemaVersion != nil {
		e := &SchemaFloorError{ClientVersion: rs.c.schema.Version(), RequiredSchema: *h.RequiredSchemaVersion}
		if h.LatestSchemaVersion != nil {
			e.LatestSchema = *h.LatestSchemaVersion
		}
		return e
	}
	return nil
}

func (rs *roundState) subStart(f *wire.SubStart) error {
	rs.c.mu.Lock()
	s := rs.c.sub(f.ID)
	rs.c.mu.Unlock()
	sent, ok := rs.reqSubs[f.ID]
	if s == nil || !ok {
		return fmt.Errorf("sspclient: SUB_START for unrequested subscription %q", f.ID)
	}
	rs.open, rs.segsSeen = s, 0
	rs.fresh = f.Bootstrap && sent.cursor < 0 && !sent.resumed
	rs.res.Sections = append(rs.res.Sections, Section{ID: f.ID, Status: f.Status, Reason: f.ReasonCode,
		Effective: f.EffectiveScopes, Bootstrap: f.Bootstrap})
	rs.section = &rs.res.Sections[len(rs.res.Sections)-1]
	return nil
}

// commit applies one COMMIT frame in one step (§1.4 rule 4).
func (rs *roundState) commit(f *wire.Commit) error {
	if rs.open == nil {
		return fmt.Errorf("sspclient: COMMIT outside a subscription section")
	}
	type change struct {
		table  string
		row    Row
		del    bool
		scopes wire.StoredScopes
	}
	changes := make([]change, len(f.Changes))
	for i, ch := range f.Changes {
		name := f.Tables[ch.TableIndex]
		t, ok := rs.c.schema.Table(name)
		if !ok {
			return fmt.Errorf("sspclient: COMMIT %d changes unknown table %q", f.CommitSeq, name)
		}
		changes[i] = change{table: name, row: Row{ID: ch.RowID, Version: ch.RowVersion}, del: ch.Op == wire.OpDelete, scopes: ch.Scopes}
		if ch.Op == wire.OpUpsert {
			vals, err := t.RowCodec().DecodeRow(ch.Row)
			if err != nil {
				return fmt.Errorf("sspclient: COMMIT %d row %s: %w", f.CommitSeq, ch.RowID, err)
			}
			changes[i].row.Values = vals
		}
	}
	rs.c.mu.Lock()
	for _, ch := range changes {
		rs.c.applyChange(ch.table, f.CommitSeq, ch.row, ch.del, ch.scopes)
	}
	rs.c.mu.Unlock()
	rs.section.Commits++
	rs.section.Changes += len(changes)
	return nil
}

// subEnd persists the section's outcome (§4.4, §3.3, §4.6).
func (rs *roundState) subEnd(f *wire.SubEnd) error {
	s, sec := rs.open, rs.section
	if s == nil {
		return fmt.Errorf("sspclient: SUB_END outside a subscription section")
	}
	c := rs.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s.status, s.reason = sec.Status, sec.Reason
	switch sec.Status {
	case wire.SubActive:
		s.effective = sec.Effective
		s.cursor, s.bootstrapState = f.NextCursor, nil
		if f.BootstrapState != nil {
			tok := *f.BootstrapState
			s.bootstrapState = &tok
		}
	case wire.SubRevoked:
		t, _ := c.schema.Table(s.table)
		sec.Purged += c.purge(t, s.effective)
		c.dropRevoked(s.table, s.effective)
	case wire.SubReset:
		s.cursor, s.bootstrapState = -1, nil
	}
	sec.NextCursor, sec.BootstrapState, sec.Complete = f.NextCursor, f.BootstrapState, true
	rs.open, rs.section = nil, nil
	return nil
}
