package realtime

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
	"unicode/utf8"

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
	// Deflate: the upgrade negotiated permessage-deflate without context
	// takeover (NegotiateDeflate): the client may send compressed
	// messages, and large messages are sent to it compressed.
	Deflate bool
	// OnClose, when set, is called once the socket is closed and its
	// session removed (or at once when Attach refuses the socket because
	// the hub is closed). It is not called when Attach returns an error.
	OnClose func()
}

func newSessionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readBufferSize is the read buffer of a connection: client messages are
// small (acks, presence) or round chunks read straight into their payload.
const readBufferSize = 512

// Attach sends hello (§8.1) and starts serving the connection on a fresh
// goroutine; it returns at once. On error the caller closes the socket.
//
// The session joins the partition before the partition and the client
// record are read, and is held silent ("starting") until hello is queued:
// a commit notified meanwhile is covered by hello's latestCursor (a
// session behind it starts suppressed), and nothing — heartbeat, presence,
// delta — can precede hello.
func (h *Hub) Attach(ctx context.Context, c Conn) error {
	wc := newConn(c.NetConn, h.cfg.QueueMessages, h.cfg.QueueBytes, h.cfg.WriteTimeout, &h.stats.closedSlow)
	if c.Deflate {
		wc.z = &h.z
	}
	if h.isClosed() {
		h.refuse(wc)
		if c.OnClose != nil {
			c.OnClose()
		}
		return nil
	}
	s := &session{hub: h, conn: wc, id: newSessionID(), auth: c.Auth, clientID: c.ClientID,
		expires: c.ExpiresAt, starting: true, observed: -1, onClose: c.OnClose}
	// The hub takes the socket's descriptor over (adopt): from now on
	// only its poller watches the socket, for the reader goroutines and
	// flushers too. The connection is switched over before the session
	// joins its partition, where Close (a close frame) or a fan-out may
	// reach it: a switch after that raced their writes, which could go
	// to the connection adopt closes.
	adopted := h.poll != nil && wc.rc != nil && wc.adopt(c.NetConn)
	// The session joins its partition's state, created if the hub keeps
	// none (forget), looked up again if it was forgotten meanwhile.
	p := h.lockPart(c.Auth.Partition, true)
	s.part = p
	p.addLocked(s)
	p.mu.Unlock()
	if adopted && !h.poll.add(s) {
		// Registered now, before hello is queued.
		wc.close()
		h.leave(s)
		return errors.New("realtime: the hub is closing")
	}
	h.stats.sessions.Add(1)
	h.churn.Add(1)
	if err := h.start(ctx, s); err != nil {
		h.leave(s)
		h.stats.sessions.Add(-1)
		if wc.fc != nil {
			h.poll.remove(wc)
			wc.close() // the caller's Close does not reach the adopted descriptor
		}
		return err
	}
	if h.isClosed() {
		wc.closeWith(ws.StatusGoingAway, "server shutting down") // Close ran meanwhile
	}
	// The socket closes when its credentials expire, at that moment
	// rather than at the next heartbeat (which also checks).
	if !c.ExpiresAt.IsZero() {
		t := time.AfterFunc(time.Until(c.ExpiresAt), func() {
			wc.closeWith(ws.StatusPolicyViolation, "credentials expired")
		})
		// The session may have ended already (its reader runs since
		// start): then end found no timer to stop.
		s.mu.Lock()
		s.expiry = t
		ended := s.ended
		s.mu.Unlock()
		if ended {
			t.Stop()
		}
	}
	if h.poll != nil && wc.rc != nil && len(c.Buffered) == 0 {
		// Parked at once: the poller starts a reader when bytes arrive.
		// A connection already closing (expired credentials, the hub's
		// Close) is read by a goroutine until its end instead.
		wc.mu.Lock()
		park := !wc.closing && !wc.closed
		if park {
			wc.parked = true
			wc.kick = func() { h.wakeReader(s) }
		}
		wc.mu.Unlock()
		if park {
			var armed bool
			if wc.fc != nil {
				armed = h.poll.rearm(wc) // registered above
			} else {
				armed = h.poll.add(s)
			}
			if armed {
				if wc.isClosing() {
					h.wakeReader(s) // it began closing meanwhile: read it to its end
				}
				return nil
			}
			wc.mu.Lock()
			still := wc.parked
			wc.parked, wc.kick = false, nil
			wc.mu.Unlock()
			if !still {
				return nil // a close started its reader meanwhile
			}
		}
	}
	var src io.Reader = wc.nc
	if len(c.Buffered) > 0 {
		src = io.MultiReader(&sliceReader{b: c.Buffered}, wc.nc)
	}
	go h.readLoop(s, bufio.NewReaderSize(src, readBufferSize))
	return nil
}

// wakeReader starts a reader goroutine for a parked connection: bytes
// arrived, or it must be read to its end (a close).
func (h *Hub) wakeReader(s *session) {
	c := s.conn
	c.mu.Lock()
	if !c.parked {
		c.mu.Unlock()
		return
	}
	c.parked = false
	c.mu.Unlock()
	go h.readPolled(s, nil, false)
}

// readable runs on the poller's goroutine when a parked connection's
// socket has bytes. The common client message, an ack, is handled right
// there: the bytes are read without waiting into the poller's buffer, the
// complete masked ack frames at their start are applied (an ack only
// takes the session's lock), and the connection is parked again, with no
// goroutine started. Anything else (another message, a frame cut by the
// segment boundary, a control frame, the end of the stream, a hang-up, a
// closing connection) is left to a reader goroutine, which gets the bytes
// already read first.
func (h *Hub) readable(s *session, hup bool, buf []byte) {
	c := s.conn
	c.mu.Lock()
	if !c.parked {
		c.mu.Unlock()
		return // a close started its reader meanwhile
	}
	c.parked = false // this goroutine reads it now
	fast := !hup && !c.closing && !c.closed
	held := c.partial
	c.partial = nil
	if !fast {
		c.mu.Unlock()
		go h.readPolled(s, held, false)
		return
	}
	// Read under mu, with the count of a binary message start taken (a
	// sync round's request) in the same critical section: a round ending
	// meanwhile (wsConn.binaryPending) sees the bytes either in the
	// socket or counted, never in neither.
	k := copy(buf, held)
	n, err := c.readNow(buf[k:])
	taken := err == nil && n > 0 && binaryFrameIn(buf[:k+n])
	if taken {
		c.takenBinary++
	}
	c.mu.Unlock()
	switch {
	case err == syscall.EAGAIN:
		n = 0 // nothing after all: park again
	case err != nil || n == 0:
		go h.readPolled(s, held, false) // it meets the error or the end itself
		return
	}
	n += k
	used := 0
	for used < n {
		cursor, size, ok := maskedAck(buf[used:n])
		if !ok {
			break
		}
		s.ack(cursor)
		used += size
	}
	var rest []byte
	if used < n {
		rest = append([]byte(nil), buf[used:n]...)
		if !ackPrefix(rest) {
			go h.readPolled(s, rest, taken)
			return
		}
	}
	// Parked again without a system call: the registration is
	// edge-triggered, so bytes that come from now on make a new event.
	// Only a read that filled the buffer may have left bytes behind it,
	// with no new event to come for them: the re-arm reports them.
	if !h.parkHolding(s, rest, n == len(buf)) {
		go h.readPolled(s, rest, taken)
		return
	}
	if taken {
		c.untakeBinary() // impossible: a binary start is no ack prefix
	}
}

// ackPrefix reports whether b may be the start of a frame maskedAck
// takes, cut short: the rest is still to come.
func ackPrefix(b []byte) bool {
	const finText, masked = 0x80 | byte(ws.OpText), 0x80
	switch {
	case len(b) == 0 || b[0] != finText:
		return false
	case len(b) == 1:
		return true
	}
	n := int(b[1] &^ masked)
	return b[1]&masked != 0 && n <= 125 && len(b) < 6+n
}

// maskedAck reads a complete client ack at the start of b: one unfragmented
// masked text frame of at most 125 bytes whose payload ParseAckFast accepts.
// It returns the cursor and the frame's size; false for anything else.
func maskedAck(b []byte) (cursor int64, size int, ok bool) {
	const finText, masked = 0x80 | byte(ws.OpText), 0x80
	if len(b) < 6 || b[0] != finText || b[1]&masked == 0 {
		return 0, 0, false
	}
	n := int(b[1] &^ masked)
	if n > 125 || len(b) < 6+n {
		return 0, 0, false
	}
	var payload [125]byte
	p := payload[:n]
	copy(p, b[6:6+n])
	for i := range p {
		p[i] ^= b[2+i%4]
	}
	cursor, ok = wire.ParseAckFast(p)
	if !ok {
		return 0, 0, false
	}
	return cursor, 6 + n, true
}

// prefixed reads bytes already taken from a socket, then the socket.
type prefixed struct {
	b  []byte
	nc net.Conn
}

func (p *prefixed) Read(q []byte) (int, error) {
	if len(p.b) > 0 {
		n := copy(q, p.b)
		p.b = p.b[n:]
		return n, nil
	}
	return p.nc.Read(q)
}

// readPolled reads a polled connection's messages with a pooled buffer
// while bytes keep coming, then parks it again and returns: between
// bursts the connection holds neither a goroutine nor a buffer. first
// holds bytes the poller read from the socket: they are read first.
// taken: first holds a binary message start the poller counted
// (wsConn.takenBinary); the count is given back once every byte of first
// was read as a message, before that message is handled.
func (h *Hub) readPolled(s *session, first []byte, taken bool) {
	if h.hooks.readPolled != nil {
		h.hooks.readPolled(taken)
	}
	h.polledReaders.Add(1)
	c := s.conn
	c.mu.Lock()
	if held := c.partial; len(held) > 0 {
		first = append(held, first...)
	}
	c.partial = nil
	c.mu.Unlock()
	var src io.Reader = s.conn.nc
	var pre *prefixed
	if len(first) > 0 {
		pre = &prefixed{b: first, nc: s.conn.nc}
		src = pre
	}
	r := h.getReader(src)
	var read func()
	if taken {
		read = func() {
			if taken && len(pre.b) == 0 && r.Buffered() == 0 {
				taken = false
				c.untakeBinary()
			}
		}
		defer func() {
			if taken {
				c.untakeBinary()
			}
		}()
	}
	for {
		if h.readOne(s, r, read) {
			h.putReader(r)
			h.end(s)
			return
		}
		if r.Buffered() == 0 && (pre == nil || len(pre.b) == 0) && h.park(s) {
			h.putReader(r)
			return
		}
	}
}

// park re-arms the poller for a connection that has nothing buffered. A
// closing connection is not parked: it is read until its end.
func (h *Hub) park(s *session) bool {
	return h.parkHolding(s, nil, true)
}

// parkHolding parks a connection with the start of a frame already read
// from it (see wsConn.partial); the next reader gets it first. rearm: the
// registration is re-armed (see pollEvents), as a connection a reader
// goroutine held needs; the poller's own reads need it only when bytes
// may be left in the socket.
func (h *Hub) parkHolding(s *session, partial []byte, rearm bool) bool {
	if h.isClosed() {
		return false
	}
	c := s.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.closed {
		return false
	}
	c.parked = true
	if len(partial) > 0 {
		c.partial, c.partialAt = partial, time.Now()
	}
	if rearm && !h.poll.rearm(c) {
		c.parked, c.partial = false, nil
		return false
	}
	return true
}

// stalledPartial reports whether a parked connection has held the start
// of a frame for longer than stall: its reader must apply the stall
// timeout (the hub's heartbeat checks).
func (c *wsConn) stalledPartial(now time.Time, stall time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parked && len(c.partial) > 0 && now.Sub(c.partialAt) > stall
}

func (h *Hub) getReader(src io.Reader) *bufio.Reader {
	select {
	case r := <-h.readers:
		r.Reset(src)
		return r
	default:
		return bufio.NewReaderSize(src, readBufferSize)
	}
}

func (h *Hub) putReader(r *bufio.Reader) {
	r.Reset(nil)
	select {
	case h.readers <- r:
	default:
	}
}

// end detaches a session whose reading ended.
//
// The connection leaves the poller only once it is closed: a close frame
// that waits for room in the socket's buffer (an adopted socket's write)
// is woken by the poller's events.
func (h *Hub) end(s *session) {
	h.detach(s)
	if h.poll != nil {
		h.poll.remove(s.conn)
	}
	s.mu.Lock() // detach dropped an unfinished round and its stall timer
	s.ended = true
	expiry := s.expiry
	s.mu.Unlock()
	if expiry != nil {
		expiry.Stop()
	}
}

// leave removes a session that did not start from its partition.
func (h *Hub) leave(s *session) {
	p := s.part
	p.mu.Lock()
	p.removeLocked(s)
	idle := p.idleLocked()
	p.mu.Unlock()
	if idle {
		h.forget(p)
	}
}

// refuse answers an upgrade that arrived after Close with a going-away
// close frame.
func (h *Hub) refuse(wc *wsConn) {
	wc.closeWith(ws.StatusGoingAway, "server shutting down")
	go func() {
		<-wc.sentC()
		wc.close()
	}()
}

// readStart reads the client record (ErrNotFound when there is none)
// and the partition (zero when unknown). A store that reads both at once
// (store.RequestStateReader) does: one read instead of two, shared by
// the attaches of a partition that arrive together (a reconnect storm's),
// so that they keep to few read connections and their page caches.
func (h *Hub) readStart(ctx context.Context, partition, clientID string) (store.ClientRecord, store.Partition, error) {
	if rs, ok := h.cfg.Store.(store.RequestStateReader); ok {
		st, err := rs.ReadRequestState(ctx, partition, clientID, h.cfg.Engine.Schema().Version())
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.ClientRecord{}, store.Partition{}, store.ErrNotFound
		case err != nil:
			return store.ClientRecord{}, store.Partition{}, err
		case st.Client == nil:
			return store.ClientRecord{}, st.Partition, store.ErrNotFound
		}
		return *st.Client, st.Partition, nil
	}
	rec, err := h.cfg.Store.Client(ctx, partition, clientID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rec, store.Partition{}, err
	}
	part, perr := h.cfg.Store.Partition(ctx, partition)
	if perr != nil && !errors.Is(perr, store.ErrNotFound) {
		return rec, store.Partition{}, perr
	}
	return rec, part, err
}

// start reads the client record and the partition, loads the
// registrations and queues hello.
func (h *Hub) start(ctx context.Context, s *session) error {
	s.mu.Lock()
	gen := s.grantGen
	s.mu.Unlock()
	rec, part, err := h.readStart(ctx, s.auth.Partition, s.clientID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		rec = store.ClientRecord{Cursor: -1, WireVersion: wire.Version3}
	case err != nil:
		return err
	case rec.ActorID != s.auth.ActorID:
		rec = store.ClientRecord{Cursor: -1, WireVersion: wire.Version3}
	}
	regs := h.loadRegistrations(ctx, s.auth, s.clientID, rec)
	version := rec.WireVersion
	if !wire.SupportedVersion(version) {
		version = wire.Version3
	}
	rs := h.newRegSet(regs, version, part.LogEpoch)
	p := s.part
	p.mu.Lock()
	defer p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.next == 0 {
		p.next = part.MaxCommitSeq + 1
	}
	latest := max(part.MaxCommitSeq, s.observed) // a commit notified after the read counts
	s.observed = latest
	s.epoch = part.LogEpoch
	s.subs = store.SubscriptionsDigest(rec.Subscriptions)
	behind := rec.Cursor < latest
	s.suppressed = behind
	s.starting = false
	// Scopes re-resolved while the registrations were computed narrow
	// them before they are installed.
	rs = s.sinceLocked(gen, rs, part.LogEpoch)
	hello := wire.Hello{ProtocolVersion: wire.RealtimeProtocolVersion, SessionID: s.id, ActorID: s.auth.ActorID,
		ClientID: s.clientID, Cursor: rec.Cursor, LatestCursor: latest,
		RequiresSync: behind || len(rs.regs) == 0, Timestamp: h.cfg.Now()}
	s.sendData(textFrame(hello.AppendJSON(nil)))
	s.installLocked(rs) // the presence snapshot follows hello
	return nil
}

type sliceReader struct{ b []byte }

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
// Once the connection is closing it discards what still arrives, until
// the peer closes its side or the close linger ends.
func (h *Hub) readLoop(s *session, r *bufio.Reader) {
	for !h.readOne(s, r, nil) {
	}
	h.end(s)
}

// readOne reads and handles one client message; it reports whether the
// connection's reading has ended. read, when set, runs after the message
// is read and before it is handled.
func (h *Hub) readOne(s *session, r *bufio.Reader, read func()) (end bool) {
	m, err := s.conn.readMessage(r, h.cfg.MaxMessageBytes, h.cfg.StallTimeout, h.cfg.Bodies)
	if read != nil {
		read()
	}
	if m.taken > 0 {
		// Given back once the message is handled, unless a round keeps it.
		defer func() {
			if m.taken > 0 {
				h.cfg.Bodies.GiveBody(m.taken)
			}
		}()
	}
	if err != nil {
		switch {
		case errors.Is(err, errBodyBudget):
			h.stats.closedBusy.Add(1)
			s.conn.closeWith(statusTryAgainLater, "the server is at capacity; retry later")
		case errors.Is(err, errTooLarge):
			s.conn.closeWith(ws.StatusMessageTooBig, "message too large")
		case errors.Is(err, errProtocol):
			h.protocolClose(s, "websocket protocol violation")
		}
		return true
	}
	if s.conn.isClosing() {
		return m.op == ws.OpClose // the peer answered our close frame
	}
	switch m.op {
	case ws.OpClose:
		s.conn.closeWith(ws.StatusNormalClosure, "")
		return true
	case ws.OpText:
		if cursor, ok := wire.ParseAckFast(m.payload); ok {
			s.ack(cursor) // the common message, without a JSON decoder
			return false
		}
		if !utf8.Valid(m.payload) {
			// RFC 6455 §8.1: a text message that is not UTF-8 fails
			// the connection with 1007.
			h.stats.closedProtocol.Add(1)
			s.conn.closeWith(ws.StatusInvalidFramePayloadData, "text message is not UTF-8")
			return true
		}
		h.onText(s, m.payload)
	case ws.OpBinary:
		if len(m.payload) == 0 || m.payload[0] != wire.ChannelTagRound {
			h.protocolClose(s, "unknown channel tag")
			return true
		}
		taken := m.taken
		m.taken = 0 // the round keeps it
		if !s.roundChunk(m.payload[1:], taken) {
			return true
		}
	}
	return false
}

// statusTryAgainLater is the close code of a socket refused for want of
// capacity (RFC 6455 registry: 1013, try again later).
const statusTryAgainLater ws.StatusCode = 1013

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

// detach removes a session whose reader ended: a close frame already
// queued is written first; its presence leaves; its pending ack is
// persisted.
func (h *Hub) detach(s *session) {
	if s.conn.isClosing() {
		<-s.conn.sentC() // bounded by the write timeout
	}
	s.conn.close()
	p := s.part
	p.mu.Lock()
	h.dropPresenceLocked(s)
	p.removeLocked(s)
	idle := p.idleLocked()
	p.mu.Unlock()
	s.mu.Lock()
	if s.round != nil && !s.round.responding {
		s.dropRoundLocked() // a request the client never finished
	}
	s.mu.Unlock()
	if idle {
		h.forget(p)
	}
	if a, ok := s.takeAck(h.cfg.Now()); ok {
		_, _ = h.cfg.Store.AdvanceClientCursor(context.Background(), s.auth.Partition, a)
	}
	h.stats.sessions.Add(-1)
	h.churn.Add(1)
	if s.onClose != nil {
		s.onClose()
	}
}
