package realtime

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// streamScanner follows the frames of an SSP2 byte stream fed in pieces
// (the envelope header, then 5-byte frame headers and payloads) to find
// where the END frame ends (§1.2: the grammar is self-delimiting).
type streamScanner struct {
	skip  int64 // bytes left of the envelope header or a payload
	hdr   [5]byte
	hn    int
	ended bool
	past  int // bytes fed after END
}

func newStreamScanner() streamScanner { return streamScanner{skip: 8} }

func (sc *streamScanner) feed(p []byte) {
	for len(p) > 0 {
		switch {
		case sc.ended:
			sc.past += len(p)
			return
		case sc.skip > 0:
			n := min(int64(len(p)), sc.skip)
			sc.skip -= n
			p = p[n:]
		default:
			c := copy(sc.hdr[sc.hn:], p)
			sc.hn += c
			p = p[c:]
			if sc.hn == len(sc.hdr) {
				sc.hn = 0
				if sc.hdr[0] == byte(wire.FrameEnd) {
					sc.ended = true
				} else {
					sc.skip = int64(binary.LittleEndian.Uint32(sc.hdr[1:]))
				}
			}
		}
	}
}

// roundState accumulates a round's request stream (§8.7): the request is
// complete when its END frame is consumed.
type roundState struct {
	buf     []byte
	scan    streamScanner
	checked bool // the envelope header was validated
	// taken is what buf's bytes past the free part took from the body
	// budget (Config.Bodies), given back when the round is dropped.
	taken      int64
	responding bool
	// stall ends the socket when the round's next chunk does not come
	// within the stall timeout of the last one (at last).
	stall *time.Timer
	last  time.Time
}

// stopStall stops the round's stall timer (a round completed or dropped).
func (rs *roundState) stopStall() {
	if rs != nil && rs.stall != nil {
		rs.stall.Stop()
	}
}

// armRoundStallLocked (re)starts the stall timer of an unfinished round.
// A socket may be silent between messages, but not inside a round split
// over several: a round whose next chunk does not arrive within the stall
// timeout ends the socket, so that the chunks it holds (up to
// MaxMessageBytes) are not kept for as long as the socket stays open.
// s.mu is held.
func (s *session) armRoundStallLocked(rs *roundState) {
	d := s.hub.cfg.StallTimeout
	rs.last = time.Now()
	if rs.stall == nil {
		rs.stall = time.AfterFunc(d, func() { s.roundStalled(rs) })
		return
	}
	rs.stall.Reset(d)
}

// roundStalled runs when a round's stall timer fires: a chunk that
// arrived meanwhile re-armed it, otherwise the round is dropped and the
// socket closed.
func (s *session) roundStalled(rs *roundState) {
	s.mu.Lock()
	stalled := s.round == rs && !rs.responding && time.Since(rs.last) >= s.hub.cfg.StallTimeout
	if stalled {
		s.dropRoundLocked()
	}
	s.mu.Unlock()
	if stalled {
		s.hub.stats.closedProtocol.Add(1)
		s.conn.closeWith(ws.StatusPolicyViolation, "sync round stalled")
	}
}

// roundChunk takes one 0x01 chunk from the client. It reports false when
// the connection was closed for a protocol violation.
//
// taken is what the chunk's message took from the body budget; the round
// keeps it, and takes what its whole request needs past the free part.
func (s *session) roundChunk(chunk []byte, taken int64) bool {
	h := s.hub
	s.mu.Lock()
	rs := s.round
	if rs != nil && rs.responding {
		s.mu.Unlock()
		if taken > 0 {
			h.cfg.Bodies.GiveBody(taken)
		}
		h.protocolClose(s, "pipelined sync round")
		return false
	}
	if rs == nil {
		rs = &roundState{scan: newStreamScanner()}
		s.round = rs
	}
	rs.taken += taken
	if rs.buf == nil {
		rs.buf = chunk // the reader allocated it for this message
	} else {
		rs.buf = append(rs.buf, chunk...)
	}
	if int64(len(rs.buf)) > h.cfg.MaxMessageBytes {
		s.dropRoundLocked()
		s.mu.Unlock()
		s.conn.closeWith(ws.StatusMessageTooBig, "sync round too large")
		return false
	}
	if b := h.cfg.Bodies; b != nil {
		switch need := int64(len(rs.buf)) - BodyFreeBytes - rs.taken; {
		case need > 0:
			if !b.TakeBody(need) {
				s.dropRoundLocked()
				s.mu.Unlock()
				h.stats.closedBusy.Add(1)
				s.conn.closeWith(statusTryAgainLater, "the server is at capacity; retry later")
				return false
			}
			rs.taken += need
		case need < 0 && rs.taken > 0:
			give := min(-need, rs.taken)
			b.GiveBody(give)
			rs.taken -= give
		}
	}
	if !rs.checked && len(rs.buf) >= 8 {
		if !validRequestHeader(rs.buf[:8]) {
			s.dropRoundLocked()
			s.mu.Unlock()
			h.protocolClose(s, "not an SSP2 request stream")
			return false
		}
		rs.checked = true
	}
	rs.scan.feed(chunk)
	if !rs.scan.ended {
		s.armRoundStallLocked(rs)
		s.mu.Unlock()
		return true
	}
	rs.stopStall()
	if rs.scan.past > 0 {
		s.dropRoundLocked()
		s.mu.Unlock()
		h.protocolClose(s, "bytes after the request's END frame")
		return false
	}
	rs.responding = true
	s.roundActive = true
	s.roundMissed, s.roundMissedOverflow = nil, false
	body := rs.buf
	s.mu.Unlock()
	go s.runRound(body)
	return true
}

// dropRoundLocked ends the round's request state and gives back what
// it took from the body budget.
func (s *session) dropRoundLocked() {
	if rs := s.round; rs != nil {
		rs.stopStall()
		if rs.taken > 0 {
			s.hub.cfg.Bodies.GiveBody(rs.taken)
			rs.taken = 0
		}
	}
	s.round = nil
}

func validRequestHeader(h []byte) bool {
	return string(h[:4]) == "SSP2" && wire.SupportedVersion(binary.LittleEndian.Uint16(h[4:6])) &&
		wire.MsgKind(h[6]) == wire.KindRequest && h[7] == 0
}

// roundWriter streams a round's response as 0x01 chunks, one per encoder
// flush, slowing to the socket's pace instead of buffering (§8.7
// backpressure). It holds the latest chunk back: the one that carries END
// is queued by endRound together with the round's end, so the client can
// never see END before the connection accepts its next round and carries
// the round's registrations.
type roundWriter struct {
	s       *session
	held    *frame
	scan    streamScanner
	started bool
	err     error // the first send failure
}

func (w *roundWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.held != nil {
		if err := w.s.conn.sendWait(*w.held); err != nil {
			w.err = err
			return 0, err
		}
	}
	payload := make([]byte, 0, len(p)+1)
	payload = append(payload, wire.ChannelTagRound)
	payload = append(payload, p...)
	f := binaryFrame(payload)
	if z := w.s.conn.z; z != nil {
		f.z = z.compress(ws.OpBinary, payload)
	}
	w.held = &f
	w.scan.feed(p)
	return len(p), nil
}

// Begin implements engine.Responder.
func (w *roundWriter) Begin(version uint16) (*wire.Encoder, error) {
	w.started = true
	return wire.NewEncoder(w, wire.KindResponse, version)
}

// BeginStream implements engine.StreamResponder: the engine calls it when
// the first chunk has passed the serve gate's read-verify, so a refusal
// found before that fails the round with an ERROR response instead.
func (w *roundWriter) BeginStream(uint16) (io.Writer, error) {
	w.started = true
	return w, nil
}

var _ engine.StreamResponder = (*roundWriter)(nil)

// runRound serves a complete request with the engine, exactly as POST
// /sync does, then registers the pull's subscriptions on the connection.
func (s *session) runRound(body []byte) {
	h := s.hub
	ctx := context.WithValue(context.Background(), roundSessionKey{}, s)
	s.mu.Lock()
	gen := s.grantGen
	s.mu.Unlock()
	w := &roundWriter{s: s, scan: newStreamScanner()}
	version := binary.LittleEndian.Uint16(body[4:6])
	var next *regSet
	epoch := ""
	var completed uint16 // the wire version of a completed round
	req, err := wire.DecodeRequest(body, wire.DecoderOptions{MaxFrameBytes: int(h.cfg.MaxMessageBytes)})
	switch {
	case err != nil:
		s.failRound(ctx, w, version, syncerr.Wrap(wire.ErrorCode(err), "the request is not a valid SSP2 message", err))
	case req.Header.ClientID != s.clientID:
		s.failRound(ctx, w, version, syncerr.New(syncerr.CodeInvalidClientID, "the round's clientId differs from the connection's"))
	default:
		if h.cfg.Admit != nil {
			release, refusal := h.cfg.Admit(ctx, s.auth)
			if refusal != nil {
				pe := syncerr.As(refusal)
				if pe == nil {
					pe = syncerr.Internal(refusal)
				}
				s.failRound(ctx, w, version, pe)
				break
			}
			defer release()
		}
		out, err := h.cfg.Engine.ServeRound(ctx, s.auth, req, w)
		epoch = out.LogEpoch
		switch {
		case err != nil && !w.started:
			pe := syncerr.As(err)
			if pe == nil {
				pe = syncerr.Internal(err)
			}
			s.failRound(ctx, w, version, pe)
		case err == nil && out.Completed && !out.Pulled:
			completed = req.Version
		case err == nil && out.Completed && out.Pulled:
			completed = req.Version
			s.mu.Lock()
			s.subs = out.SubscriptionsDigest
			s.mu.Unlock()
			regs := make([]registration, 0, len(out.Subscriptions))
			for _, sub := range out.Subscriptions {
				if sub.Active {
					regs = append(regs, registration{id: sub.ID, table: sub.Table, effective: sub.Effective,
						schemaVersion: out.SchemaVersion})
				}
			}
			rs := h.newRegSet(regs, req.Version, epoch)
			next = &rs
		}
	}
	s.endRound(w, next, epoch, completed, gen)
}

// endRound ends a round (§8.7 "Registration at round end"): the new
// registrations are installed while deltas are still held back, then the
// final chunk is queued in the same critical section that ends the round,
// so no delta precedes END and no next round is mistaken for pipelining.
//
// A completed round without a pull keeps the registrations but replaces the
// wire version deltas are encoded with (§8.1); any round announcing a new
// log epoch updates the epoch acks and deltas carry.
//
// Scopes re-resolved during the round (grantGen moved past gen) narrow the
// round's registrations before they are installed.
func (s *session) endRound(w *roundWriter, next *regSet, epoch string, completed uint16, gen uint64) {
	h := s.hub
	if !w.scan.ended || w.scan.past > 0 || w.held == nil {
		// The response could not be completed (the socket failed, or the
		// encoder refused a frame): the stream has no findable end.
		s.mu.Lock()
		s.dropRoundLocked()
		s.roundActive = false
		s.mu.Unlock()
		switch {
		case s.conn.isClosing():
		case errors.Is(w.err, errQueueFull):
			h.stats.closedSlow.Add(1)
			s.conn.closeWith(ws.StatusPolicyViolation, "consumer too slow")
		default:
			h.cfg.Logger.Error("realtime: sync round response incomplete", "partition", s.auth.Partition, "err", w.err)
			s.conn.closeWith(ws.StatusInternalServerError, "sync round failed")
		}
		return
	}
	if next == nil && (epoch != "" || completed != 0) {
		// A round that re-registers nothing may still announce the log
		// epoch (the first round on a new partition, an epoch reset) or
		// change the wire version: deltas and acks use them from now on.
		s.mu.Lock()
		curEpoch, curVersion, regs := s.epoch, s.version, s.regs
		s.mu.Unlock()
		newEpoch, newVersion := curEpoch, curVersion
		if epoch != "" {
			newEpoch = epoch
		}
		if completed != 0 {
			newVersion = completed
		}
		if newEpoch != curEpoch || newVersion != curVersion {
			rs := h.newRegSet(regs, newVersion, newEpoch)
			next = &rs
		}
	}
	if next != nil {
		p := s.part
		p.mu.Lock()
		s.mu.Lock()
		if epoch != "" {
			s.epoch = epoch
		}
		s.installLocked(s.sinceLocked(gen, *next, s.epoch))
		s.mu.Unlock()
		p.mu.Unlock()
	}
	if h.hooks.roundEnd != nil {
		h.hooks.roundEnd()
	}
	if s.conn.binaryPending() {
		// The client's next sync round arrived before this one's last
		// chunk went out (§8.7), but after the reader parked the socket:
		// pipelining, caught before the END that would make it legal.
		s.mu.Lock()
		s.dropRoundLocked()
		s.roundActive = false
		s.mu.Unlock()
		h.protocolClose(s, "pipelined sync round")
		return
	}
	err := s.conn.waitFor(func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.conn.send(*w.held); err != nil {
			return err
		}
		s.dropRoundLocked()
		s.roundActive = false
		s.checkRoundMissedLocked()
		return nil
	})
	if err != nil {
		s.mu.Lock()
		s.dropRoundLocked()
		s.roundActive = false
		s.mu.Unlock()
		if errors.Is(err, errQueueFull) {
			h.stats.closedSlow.Add(1)
			s.conn.closeWith(ws.StatusPolicyViolation, "consumer too slow")
		}
	}
}

// checkRoundMissedLocked wakes the session when a commit observed during
// the round did not match the old registrations but matches the new ones:
// the round's pull may have read the log before it. mu is held.
func (s *session) checkRoundMissedLocked() {
	missed, overflow := s.roundMissed, s.roundMissedOverflow
	s.roundMissed, s.roundMissedOverflow = nil, false
	hit := overflow
	for _, n := range missed {
		if hit {
			break
		}
		hit = s.matchesLocked(n)
	}
	if hit {
		s.hub.stats.dropsInRound.Add(1)
		s.suppressed = true
		s.wakeLocked(wire.WakeCatchupRequired)
	}
}

// failRound answers a request-level failure on the socket as a minimal
// response: RESP_HEADER, ERROR, END (§8.7 failures).
func (s *session) failRound(ctx context.Context, w *roundWriter, version uint16, pe *syncerr.Error) {
	h := s.hub
	if pe.Code == syncerr.CodeInternalError {
		h.cfg.Logger.Error("socket round failed", "partition", s.auth.Partition, "err", pe.Err)
	}
	enc, err := wire.NewEncoder(w, wire.KindResponse, version)
	if err != nil {
		return
	}
	hdr := &wire.RespHeader{}
	if version >= wire.Version2 {
		hdr.LogEpoch = h.cfg.Engine.PartitionEpoch(ctx, s.auth.Partition)
	}
	ent := pe.Entry()
	ef := &wire.ErrorFrame{Code: pe.Code, Message: pe.Message, Category: ent.Category,
		Retryable: ent.Retryable, RecommendedAction: ent.Action}
	if len(pe.Details) > 0 {
		d := string(pe.Details)
		ef.Details = &d
	}
	if err := errors.Join(enc.Encode(hdr), enc.Encode(ef), enc.Close()); err != nil {
		h.cfg.Logger.Debug("socket round failure not delivered", "err", err)
	}
}
