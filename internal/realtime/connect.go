package realtime

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Conn is an upgraded WebSocket connection handed to the hub.
type Conn struct {
	NetConn net.Conn
	// Buffered holds bytes the HTTP server read past the handshake.
	Buffered []byte
	Auth     engine.Auth
	ClientID string
	// ExpiresAt, when set, closes the socket when the credentials expire.
	ExpiresAt time.Time
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Attach sends hello (§8.1) and starts serving the connection on a fresh
// goroutine; it returns at once.
func (h *Hub) Attach(ctx context.Context, c Conn) error {
	wc := newConn(c.NetConn, h.cfg.QueueMessages, h.cfg.QueueBytes, h.cfg.WriteTimeout)
	rec, err := h.cfg.Store.Client(ctx, c.Auth.Partition, c.ClientID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if errors.Is(err, store.ErrNotFound) {
		rec = store.ClientRecord{Cursor: -1, WireVersion: wire.Version3}
	} else if rec.ActorID != c.Auth.ActorID {
		rec = store.ClientRecord{Cursor: -1, WireVersion: wire.Version3}
	}
	part, err := h.cfg.Store.Partition(ctx, c.Auth.Partition)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	p := h.part(c.Auth.Partition, true)
	s := &session{hub: h, part: p, conn: wc, id: newSessionID(), auth: c.Auth, clientID: c.ClientID,
		epoch: part.LogEpoch, expires: c.ExpiresAt, observed: part.MaxCommitSeq}
	regs := h.loadRegistrations(ctx, c.Auth, c.ClientID, rec)
	behind := rec.Cursor < part.MaxCommitSeq
	s.suppressed = behind
	p.mu.Lock()
	if p.next == 0 {
		p.next = part.MaxCommitSeq + 1
	}
	p.sessions[s] = struct{}{}
	p.mu.Unlock()
	h.stats.sessions.Add(1)
	version := rec.WireVersion
	if !wire.SupportedVersion(version) {
		version = wire.Version3
	}
	hello := wire.Hello{ProtocolVersion: wire.RealtimeProtocolVersion, SessionID: s.id, ActorID: c.Auth.ActorID,
		ClientID: c.ClientID, Cursor: rec.Cursor, LatestCursor: part.MaxCommitSeq,
		RequiresSync: behind || len(regs) == 0, Timestamp: h.cfg.Now()}
	s.sendData(textFrame(hello.AppendJSON(nil)))
	s.setRegistrations(regs, version)
	var src io.Reader = c.NetConn
	if len(c.Buffered) > 0 {
		src = io.MultiReader(bytesReader(c.Buffered), c.NetConn)
	}
	go h.readLoop(s, bufio.NewReaderSize(src, 512))
	return nil
}

type sliceReader struct{ b []byte }

func bytesReader(b []byte) *sliceReader { return &sliceReader{b: b} }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// readLoop reads client messages until the connection ends. It keeps
// reading while a round runs, so a pipelined round is detected (§8.7).
func (h *Hub) readLoop(s *session, r *bufio.Reader) {
	defer h.detach(s)
	for {
		_ = s.conn.nc.SetReadDeadline(time.Time{})
		m, err := s.conn.readMessage(r, h.cfg.MaxMessageBytes)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				s.conn.closeWith(ws.StatusMessageTooBig, "message too large")
			}
			return
		}
		switch m.op {
		case ws.OpClose:
			s.conn.closeWith(ws.StatusNormalClosure, "")
			return
		case ws.OpText:
			h.onText(s, m.payload)
		case ws.OpBinary:
			if len(m.payload) == 0 || m.payload[0] != wire.ChannelTagRound {
				h.protocolClose(s, "unknown channel tag")
				return
			}
			if !s.roundChunk(m.payload[1:]) {
				return
			}
		}
	}
}

func (h *Hub) protocolClose(s *session, reason string) {
	h.stats.closedProtocol.Add(1)
	s.conn.closeWith(ws.StatusProtocolError, reason)
}

func (h *Hub) onText(s *session, b []byte) {
	m, err := wire.ParseClientMessage(b)
	if err != nil {
		// A malformed ack is ignored, like the reference; a malformed
		// presence message closes the connection.
		if bytesContains(b, `"presence"`) {
			h.protocolClose(s, "malformed presence message")
		}
		return
	}
	switch m := m.(type) {
	case wire.Ack:
		s.ack(m.Cursor)
	case wire.PresencePublish:
		h.publish(s, m)
	}
}

func bytesContains(b []byte, sub string) bool {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == sub {
			return true
		}
	}
	return false
}

// detach removes a closed session: its presence leaves, its pending ack is
// persisted by the flusher's next pass.
func (h *Hub) detach(s *session) {
	s.conn.close()
	h.dropPresence(s)
	p := s.part
	p.mu.Lock()
	delete(p.sessions, s)
	p.mu.Unlock()
	if cursor, ok := s.takeAck(); ok {
		_, _ = h.cfg.Store.AdvanceClientCursor(context.Background(), s.auth.Partition, store.CursorAdvance{
			ClientID: s.clientID, ActorID: s.auth.ActorID, LogEpoch: s.epoch, Cursor: cursor, AtMs: h.cfg.Now()})
	}
	h.stats.sessions.Add(-1)
}
