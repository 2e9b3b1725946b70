package realtime

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// roundState accumulates a round's request stream (§8.7): the request is
// complete when its END frame is consumed, found by walking frame headers.
type roundState struct {
	buf        []byte
	scanned    int // offset of the next frame header to read
	responding bool
}

// roundChunk takes one 0x01 chunk from the client. It reports false when
// the connection was closed for a protocol violation.
func (s *session) roundChunk(chunk []byte) bool {
	h := s.hub
	s.mu.Lock()
	rs := s.round
	if rs != nil && rs.responding {
		s.mu.Unlock()
		h.protocolClose(s, "pipelined sync round")
		return false
	}
	if rs == nil {
		rs = &roundState{scanned: 8}
		s.round = rs
	}
	rs.buf = append(rs.buf, chunk...)
	if int64(len(rs.buf)) > h.cfg.MaxMessageBytes {
		s.mu.Unlock()
		s.conn.closeWith(ws.StatusMessageTooBig, "sync round too large")
		return false
	}
	if len(rs.buf) >= 8 && !validRequestHeader(rs.buf[:8]) {
		s.mu.Unlock()
		h.protocolClose(s, "not an SSP2 request stream")
		return false
	}
	end := -1
	for len(rs.buf) >= 8 && rs.scanned+5 <= len(rs.buf) {
		t := rs.buf[rs.scanned]
		n := int(binary.LittleEndian.Uint32(rs.buf[rs.scanned+1:]))
		if t == 0 {
			end = rs.scanned + 5
			break
		}
		if n > len(rs.buf)-rs.scanned-5 {
			break
		}
		rs.scanned += 5 + n
	}
	if end < 0 {
		s.mu.Unlock()
		return true
	}
	if end != len(rs.buf) {
		s.mu.Unlock()
		h.protocolClose(s, "bytes after the request's END frame")
		return false
	}
	rs.responding = true
	s.roundActive = true
	body := rs.buf
	s.mu.Unlock()
	go s.runRound(body)
	return true
}

func validRequestHeader(h []byte) bool {
	return string(h[:4]) == "SSP2" && wire.SupportedVersion(binary.LittleEndian.Uint16(h[4:6])) &&
		wire.MsgKind(h[6]) == wire.KindRequest && h[7] == 0
}

// socketResponder streams a round's response as 0x01 chunks, slowing to
// the socket's pace instead of buffering (§8.7 backpressure).
type socketResponder struct {
	s       *session
	started bool
}

func (r *socketResponder) Begin(version uint16) (*wire.Encoder, error) {
	r.started = true
	return wire.NewEncoder(chunkWriter{r.s}, wire.KindResponse, version)
}

type chunkWriter struct{ s *session }

func (w chunkWriter) Write(p []byte) (int, error) {
	payload := make([]byte, 0, len(p)+1)
	payload = append(payload, wire.ChannelTagRound)
	payload = append(payload, p...)
	if err := w.s.conn.sendWait(binaryFrame(payload)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// runRound serves a complete request with the engine, exactly as POST
// /sync does, then registers the pull's subscriptions on the connection.
func (s *session) runRound(body []byte) {
	h := s.hub
	ctx := context.Background()
	defer func() {
		s.mu.Lock()
		s.round = nil
		s.roundActive = false
		s.mu.Unlock()
	}()
	version := binary.LittleEndian.Uint16(body[4:6])
	req, err := wire.DecodeRequest(body, wire.DecoderOptions{MaxFrameBytes: int(h.cfg.MaxMessageBytes)})
	if err != nil {
		s.failRound(ctx, version, syncerr.Wrap(wire.ErrorCode(err), "the request is not a valid SSP2 message", err))
		return
	}
	if req.Header.ClientID != s.clientID {
		s.failRound(ctx, version, syncerr.New(syncerr.CodeInvalidClientID, "the round's clientId differs from the connection's"))
		return
	}
	resp := &socketResponder{s: s}
	out, err := h.cfg.Engine.ServeRound(ctx, s.auth, req, resp)
	if err != nil && !resp.started {
		pe := syncerr.As(err)
		if pe == nil {
			pe = syncerr.Internal(err)
		}
		s.failRound(ctx, version, pe)
		return
	}
	if err != nil || !out.Completed || !out.Pulled {
		return
	}
	regs := make([]registration, 0, len(out.Subscriptions))
	for _, sub := range out.Subscriptions {
		if sub.Active {
			regs = append(regs, registration{id: sub.ID, table: sub.Table, effective: sub.Effective})
		}
	}
	s.setRegistrations(regs, req.Version)
}

// failRound answers a request-level failure on the socket as a minimal
// response: RESP_HEADER, ERROR, END (§8.7 failures).
func (s *session) failRound(ctx context.Context, version uint16, pe *syncerr.Error) {
	h := s.hub
	if pe.Code == syncerr.CodeInternalError {
		h.cfg.Logger.Error("socket round failed", "partition", s.auth.Partition, "err", pe.Err)
	}
	enc, err := wire.NewEncoder(chunkWriter{s}, wire.KindResponse, version)
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

var _ engine.Responder = (*socketResponder)(nil)
