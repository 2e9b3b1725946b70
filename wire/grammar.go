package wire

// grammar checks frame order (§1.2 rules 1-2, §1.5, §1.6) one frame at a
// time. The decoder and the encoder share it, so that neither accepts a
// sequence the other would refuse.
type grammar struct {
	kind     MsgKind
	started  bool
	ended    bool
	errSeen  bool
	sawPush  bool
	sawPull  bool
	sawLease bool
	sawBody  bool // a known frame other than the header and LEASE
	sawSub   bool
	inSub    bool
	commits  bool // the open subscription carried COMMIT frames
	segments bool // the open subscription carried segment frames

	lastPush    *PushResult
	lastDetails bool
}

func (g *grammar) next(f Frame) string {
	t := f.Type()
	if !g.started {
		g.started = true
		if (g.kind == KindRequest && t != FrameReqHeader) || (g.kind == KindResponse && t != FrameRespHeader) {
			return "message must start with its header frame, not " + t.Name()
		}
		return ""
	}
	if g.errSeen {
		return "no frame may follow ERROR but END"
	}
	if _, unknown := f.(*Unknown); unknown {
		return ""
	}
	if k := kindOf(t); k != g.kind {
		return t.Name() + " frame is illegal in a " + g.kind.String()
	}
	if g.kind == KindRequest {
		return g.nextRequest(t)
	}
	return g.nextResponse(f)
}

func (g *grammar) nextRequest(t FrameType) string {
	switch t {
	case FrameReqHeader:
		return "duplicate REQ_HEADER"
	case FramePushCommit:
		if g.sawPull {
			return "PUSH_COMMIT after PULL_HEADER"
		}
		g.sawPush = true
	case FramePullHeader:
		if g.sawPull {
			return "duplicate PULL_HEADER"
		}
		g.sawPull = true
	case FrameSubscription:
		if !g.sawPull {
			return "SUBSCRIPTION without PULL_HEADER"
		}
	}
	return ""
}

func (g *grammar) nextResponse(f Frame) string {
	switch f := f.(type) {
	case *RespHeader:
		return "duplicate RESP_HEADER"
	case *Lease:
		if g.sawLease {
			return "duplicate LEASE"
		}
		if g.sawBody {
			return "LEASE must immediately follow RESP_HEADER"
		}
		g.sawLease = true
	case *PushResult:
		if g.sawSub {
			return "PUSH_RESULT after SUB_START"
		}
		g.lastPush, g.lastDetails = f, false
	case *PushResultDetails:
		if msg := g.details(f); msg != "" {
			return msg
		}
		g.lastDetails = true
	case *SubStart:
		if g.inSub {
			return "nested SUB_START"
		}
		g.inSub, g.sawSub, g.commits, g.segments = true, true, false, false
	case *Commit:
		if !g.inSub {
			return "COMMIT outside a subscription"
		}
		if g.segments {
			return "COMMIT and segment frames in one subscription"
		}
		g.commits = true
	case *SegmentRef, *SegmentInline:
		if !g.inSub {
			return "segment frame outside a subscription"
		}
		if g.commits {
			return "COMMIT and segment frames in one subscription"
		}
		g.segments = true
	case *SubEnd:
		if !g.inSub {
			return "SUB_END without SUB_START"
		}
		g.inSub = false
	case *ErrorFrame:
		g.errSeen = true
	}
	g.sawBody = true
	return ""
}

// details checks that a PUSH_RESULT_DETAILS companion immediately follows
// the rejected PUSH_RESULT it describes and names only its error records.
func (g *grammar) details(f *PushResultDetails) string {
	if g.sawSub {
		return "PUSH_RESULT_DETAILS after SUB_START"
	}
	p := g.lastPush
	if p == nil {
		return "PUSH_RESULT_DETAILS without a preceding PUSH_RESULT"
	}
	if g.lastDetails {
		return "duplicate PUSH_RESULT_DETAILS"
	}
	if p.ClientCommitID != f.ClientCommitID || p.Status != PushRejected {
		return "PUSH_RESULT_DETAILS does not match its rejected PUSH_RESULT"
	}
	for _, e := range f.Entries {
		found := false
		for _, r := range p.Results {
			if r.Status == OpError && r.OpIndex == e.OpIndex {
				found = true
				break
			}
		}
		if !found {
			return "PUSH_RESULT_DETAILS entry names no error result"
		}
	}
	return ""
}

// end checks the grammar at END.
func (g *grammar) end() string {
	if !g.started {
		return "message has no header frame"
	}
	if g.kind == KindRequest && !g.sawPush && !g.sawPull {
		return "request carries neither PUSH_COMMIT nor PULL_HEADER"
	}
	if g.inSub && !g.errSeen {
		return "subscription not closed by SUB_END"
	}
	g.ended = true
	return ""
}
