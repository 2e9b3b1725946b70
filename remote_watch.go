package syncgo

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/realtime"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// watchWriteTimeout bounds one write to a watch socket; a client that
// does not read is cut off after it.
const watchWriteTimeout = 10 * time.Second

// watchHub runs the live query watches of REMOTE.md §6: every commit
// (this process's, and on a shared store every other process's, through
// the commit listener) reruns the watches of its partition whose query
// names a table the commit touched; a watch whose run is in flight is
// marked dirty and reruns once when it ends.
type watchHub struct {
	s *Server

	mu     sync.Mutex
	parts  map[string]*watchPartition
	closed bool
	// listens: the store announces commits to every process, so commits
	// notified locally are remembered until the listener passes them.
	listens bool
	// listenerConnects counts the listener's starts of listening (its
	// first connect and each reconnect), each handled by a rerun of
	// every watch.
	listenerConnects atomic.Int64
	// listenerUp: the listener is connected and listening now.
	listenerUp atomic.Bool
}

type watchPartition struct {
	sessions map[*watchSession]struct{}
	listened int64              // newest seq the listener handled
	local    map[int64][]string // seq → tables of a local commit not yet listened
}

func newWatchHub(s *Server) *watchHub {
	return &watchHub{s: s, parts: map[string]*watchPartition{}}
}

// start runs the commit listener of a shared store while the server runs.
func (h *watchHub) start(ctx context.Context) {
	l, ok := h.s.cfg.Store.(store.CommitListener)
	if !ok || len(h.s.ops.queries) == 0 {
		return
	}
	h.mu.Lock()
	h.listens = true
	h.mu.Unlock()
	go func() {
		if err := l.ListenCommits(ctx, func(n store.CommitNotification) { h.listened(ctx, n) }); err != nil && ctx.Err() == nil {
			h.s.cfg.Logger.Error("operation watches: commit listener stopped", "err", err)
		}
	}()
}

// listening reports whether the hub runs a commit listener.
func (h *watchHub) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listens
}

// close ends every watch socket.
func (h *watchHub) close() {
	h.mu.Lock()
	h.closed = true
	var all []*watchSession
	for _, p := range h.parts {
		for ws := range p.sessions {
			all = append(all, ws)
		}
	}
	h.mu.Unlock()
	for _, s := range all {
		s.closeWith(ws.StatusGoingAway, "server shutting down")
	}
}

// closeActor ends the watch sockets of an actor in a partition (every
// socket of the partition for an empty actor), as credentials revoked,
// and returns how many.
func (h *watchHub) closeActor(partition, actor string) int {
	h.mu.Lock()
	var mine []*watchSession
	if p := h.parts[partition]; p != nil {
		for s := range p.sessions {
			if actor == "" || s.actor == actor {
				mine = append(mine, s)
			}
		}
	}
	h.mu.Unlock()
	for _, s := range mine {
		s.closeWith(ws.StatusPolicyViolation, "credentials revoked")
	}
	return len(mine)
}

func (h *watchHub) add(s *watchSession) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	p := h.parts[s.partition]
	if p == nil {
		p = &watchPartition{sessions: map[*watchSession]struct{}{}, local: map[int64][]string{}}
		h.parts[s.partition] = p
	}
	p.sessions[s] = struct{}{}
	return true
}

func (h *watchHub) remove(s *watchSession) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.parts[s.partition]; p != nil {
		delete(p.sessions, s)
		if len(p.sessions) == 0 {
			delete(h.parts, s.partition)
		}
	}
}

// notify reruns the watches a local commit concerns.
func (h *watchHub) notify(n CommitNotice) {
	tables := make([]string, 0, 1)
	for _, c := range n.Changes {
		if !containsStr(tables, c.Table) {
			tables = append(tables, c.Table)
		}
	}
	h.mu.Lock()
	p := h.parts[n.Partition]
	if p != nil && h.listens {
		if len(p.local) > 10000 {
			clear(p.local) // the listener is far behind: read what it brings
		}
		if n.Seq > p.listened {
			p.local[n.Seq] = tables
		}
	}
	h.mu.Unlock()
	if p != nil {
		h.dispatch(n.Partition, tables, n.Seq)
	}
}

// listened handles a notification of the commit listener.
func (h *watchHub) listened(ctx context.Context, n store.CommitNotification) {
	if n.Lost {
		h.listenerUp.Store(false)
		return
	}
	if n.Reconnected {
		h.listenerUp.Store(true)
	}
	if n.Grants || n.Reconnected {
		// Grants change what AllAllowed covers; after a reconnect commits
		// may have been missed: rerun the watches concerned.
		h.mu.Lock()
		var parts []string
		for id := range h.parts {
			if n.Reconnected || n.Partition == "" || id == n.Partition {
				parts = append(parts, id)
			}
		}
		h.mu.Unlock()
		for _, id := range parts {
			h.dispatch(id, nil, 0)
		}
		if n.Reconnected {
			h.listenerConnects.Add(1)
		}
		return
	}
	h.mu.Lock()
	p := h.parts[n.Partition]
	if p == nil || n.Seq <= p.listened {
		h.mu.Unlock()
		return
	}
	// A notification announces a write batch by its newest sequence; the
	// batch follows the newest one handled before (after). The first
	// notification since the partition's first watch does not know
	// where its batch began: it reads from the oldest result the watches
	// hold (commits through it are in every result). One too far from
	// the last reruns every watch that has not read through it.
	after := p.listened
	first, far := after == 0, after > 0 && n.Seq-after > remoteWatchBatch
	var sessions []*watchSession
	if first {
		for s := range p.sessions {
			sessions = append(sessions, s)
		}
	}
	foreign := false
	if first || far {
		// A batch is one process's: its newest commit says whose.
		_, local := p.local[n.Seq]
		foreign = !local
	} else {
		for seq := after + 1; seq <= n.Seq; seq++ {
			if _, ok := p.local[seq]; !ok {
				foreign = true
			}
		}
	}
	for seq := range p.local {
		if seq <= n.Seq {
			delete(p.local, seq)
		}
	}
	p.listened = n.Seq
	h.mu.Unlock()
	if !foreign {
		return // this process's commits: notified already
	}
	if far {
		h.dispatch(n.Partition, nil, n.Seq)
		return
	}
	if first {
		oldest := int64(-1)
		for _, s := range sessions {
			s.mu.Lock()
			for _, w := range s.watches {
				if oldest < 0 || w.seen < oldest {
					oldest = w.seen
				}
			}
			s.mu.Unlock()
		}
		if oldest < 0 {
			return // no watch
		}
		after = max(oldest, n.Seq-remoteWatchBatch, 0)
	}
	commits, err := h.s.cfg.Store.ReadCommits(ctx, n.Partition, after, n.Seq, remoteWatchBatch)
	if err != nil {
		h.s.cfg.Logger.Warn("operation watches: reading a commit failed; rerunning every watch", "partition", n.Partition, "err", err)
		h.dispatch(n.Partition, nil, n.Seq)
		return
	}
	var tables []string
	for _, c := range commits {
		for _, ch := range c.Changes {
			if !containsStr(tables, ch.Table) {
				tables = append(tables, ch.Table)
			}
		}
	}
	if len(tables) > 0 {
		h.dispatch(n.Partition, tables, n.Seq)
	}
}

// remoteWatchBatch bounds the commits read for one notification.
const remoteWatchBatch = 1000

// dispatch reruns the watches of a partition whose query names one of
// tables (nil: every watch), for commits through seq: a watch whose last
// result already read the log through seq (its snapshot's maxCommitSeq,
// read in the same database snapshot as its rows) is not rerun, as when
// the listener brings a commit that was in the log before the watch
// started. seq 0 reruns them whatever they read.
func (h *watchHub) dispatch(partition string, tables []string, seq int64) {
	h.mu.Lock()
	var sessions []*watchSession
	if p := h.parts[partition]; p != nil {
		for s := range p.sessions {
			sessions = append(sessions, s)
		}
	}
	h.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		for _, w := range s.watches {
			if (tables == nil || dependsOn(w.cq.tables, tables)) && (seq == 0 || seq > w.seen) {
				s.triggerLocked(w, seq)
			}
		}
		s.mu.Unlock()
	}
}

func dependsOn(deps, touched []string) bool {
	for _, t := range touched {
		if containsStr(deps, t) {
			return true
		}
	}
	return false
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// watchSession is one watch socket.
type watchSession struct {
	hub       *watchHub
	conn      net.Conn
	actor     string
	partition string
	ctx       context.Context
	cancel    context.CancelFunc

	wmu sync.Mutex // serializes frame writes

	// deflate: the upgrade negotiated permessage-deflate (RFC 7692, no
	// context takeover): messages of 128 bytes or more are sent
	// compressed, and the client may send compressed ones. z is the
	// realtime hub's codec (its pools and limits; nil without deflate).
	z *realtime.Deflate

	mu      sync.Mutex
	watches map[string]*watchState
	closed  bool

	// beforeWrite, when set (tests), runs before a result's frame is
	// written, with the write lock held.
	beforeWrite func()
}

// watchState is one registered watch.
type watchState struct {
	id      string
	caller  Caller
	cq      *compiledQuery
	params  any
	running bool
	dirty   bool
	// dirtyAll and dirtyThrough say what the pending rerun is for: every
	// change (a grant, a reconnect), or the commits through dirtyThrough,
	// which the run in flight may have read already.
	dirtyAll     bool
	dirtyThrough int64
	last         []byte // the last snapshot sent, to skip an identical one
	// seen is the maxCommitSeq of the last result read: commits through
	// it are in that result.
	seen int64
}

// handleWatchSocket upgrades GET /operations/realtime to a watch socket
// (REMOTE.md §6). Authentication runs before the upgrade.
func (s *Server) handleWatchSocket(w http.ResponseWriter, r *http.Request) {
	const route = "operations"
	if !s.origins.allowUpgrade(r) {
		s.writeError(w, route, syncerr.New(syncerr.CodeForbidden, "origin not allowed"))
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	noteActor(w, auth.ActorID)
	if !canHijack(w) {
		s.writeError(w, route, errNotHijackable)
		return
	}
	// A watch socket counts under the same socket caps as /realtime.
	release, refusal := s.sockets.acquire(auth.Partition, auth.ActorID)
	if refusal != nil {
		s.writeError(w, route, refusal)
		return
	}
	defer release()
	upgrader := ws.HTTPUpgrader{}
	if p := auth.WebSocketProtocol; p != "" {
		upgrader.Protocol = func(offered string) bool { return offered == p }
	}
	// permessage-deflate is negotiated as on /realtime, under the same
	// setting.
	deflate := false
	if !s.cfg.Realtime.DisableCompression && realtime.ExtensionsParse(r.Header.Values("Sec-WebSocket-Extensions")) {
		upgrader.Negotiate = realtime.NegotiateDeflate(&deflate)
	}
	conn, rw, _, err := upgrader.Upgrade(r, w)
	if err != nil {
		noteUpgradeFailed(w, err)
		return // the upgrader answered
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	sess := &watchSession{hub: s.watch, conn: conn, actor: auth.ActorID, partition: auth.Partition,
		ctx: ctx, cancel: cancel, watches: map[string]*watchState{}}
	if deflate {
		z := s.hub.Deflate()
		sess.z = &z
	}
	if !s.watch.add(sess) {
		sess.closeWith(ws.StatusGoingAway, "server shutting down")
		return
	}
	defer s.watch.remove(sess)
	if !auth.ExpiresAt.IsZero() {
		t := time.AfterFunc(time.Until(auth.ExpiresAt), func() { sess.closeWith(ws.StatusPolicyViolation, "credentials expired") })
		defer t.Stop()
	}
	stopBeat := sess.heartbeat(s.hub.Heartbeat())
	defer stopBeat()
	var br *bufio.Reader
	if rw != nil {
		br = rw.Reader
	} else {
		br = bufio.NewReader(conn)
	}
	sess.readLoop(br)
}

// heartbeat sends a WebSocket ping every interval, so that a proxy's idle
// timeout above it keeps a socket open whose queries do not change (the
// realtime sockets' heartbeat pace, docs/deployment.md), and a write to a
// peer that is gone ends the socket. The client's pong is not awaited.
// It returns the function that stops the pings.
func (s *watchSession) heartbeat(every time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	beat := func() {
		s.write(ws.OpPing, nil)
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(every)
		}
	}
	mu.Lock()
	t = time.AfterFunc(every, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// readLoop reads client messages until the socket ends.
func (s *watchSession) readLoop(br *bufio.Reader) {
	defer s.closeWith(ws.StatusNormalClosure, "")
	max := s.hub.s.ops.maxBytes
	var msg []byte
	inMessage, compressed := false, false
	stall := s.hub.s.cfg.StallTimeout
	// A message's bytes past its first realtime.BodyFreeBytes (read, or
	// inflated) are taken from the body budget (MaxBodyMemory) as on
	// /realtime, and given back once the message is handled.
	bodies := s.hub.s.realtimeBodies()
	var taken int64
	take := func(total int64) bool {
		need := total - realtime.BodyFreeBytes - taken
		if need <= 0 || bodies == nil {
			return true
		}
		if !bodies.TakeBody(need) {
			return false
		}
		taken += need
		return true
	}
	giveBack := func() {
		if taken > 0 {
			bodies.GiveBody(taken)
			taken = 0
		}
	}
	defer giveBack()
	for {
		if inMessage {
			// Inside a fragmented message the next frame must come
			// within the stall timeout too: a client that stops between
			// fragments holds no buffer for long either.
			_ = s.conn.SetReadDeadline(time.Now().Add(stall))
		}
		h, err := ws.ReadHeader(br)
		if err != nil {
			return
		}
		if h.Length > max || (inMessage && int64(len(msg))+h.Length > max) {
			s.closeWith(ws.StatusMessageTooBig, "message too large")
			return
		}
		if !h.Masked {
			s.closeWith(ws.StatusProtocolError, "client frames must be masked")
			return
		}
		// RFC 6455 §5.2 and §5.5: the reserved bits are 0 but for RSV1
		// (compressed) on the first frame of a data message when
		// permessage-deflate was negotiated (RFC 7692 §6); a control
		// frame is whole and at most 125 bytes.
		if h.Rsv != 0 {
			if s.z == nil || !h.Rsv1() || h.Rsv2() || h.Rsv3() || h.OpCode.IsControl() || h.OpCode == ws.OpContinuation {
				s.closeWith(ws.StatusProtocolError, "websocket protocol violation")
				return
			}
		}
		if h.OpCode.IsControl() && (h.Length > 125 || !h.Fin) {
			s.closeWith(ws.StatusProtocolError, "websocket protocol violation")
			return
		}
		if !h.OpCode.IsControl() && !take(int64(len(msg))+h.Length) {
			s.closeWith(statusTryAgainLater, "the server is at capacity; retry later")
			return
		}
		// A frame once begun must arrive within the stall timeout: a
		// client that stops mid-frame holds no buffer for long (and the
		// buffer grows as bytes arrive, not to the declared length).
		_ = s.conn.SetReadDeadline(time.Now().Add(stall))
		payload, err := wire.ReadGrowing(br, int(h.Length))
		if err != nil {
			return
		}
		_ = s.conn.SetReadDeadline(time.Time{})
		ws.Cipher(payload, h.Mask, 0)
		switch h.OpCode {
		case ws.OpPing:
			s.write(ws.OpPong, payload)
			continue
		case ws.OpPong:
			continue
		case ws.OpClose:
			return
		case ws.OpText, ws.OpBinary:
			if inMessage {
				s.closeWith(ws.StatusProtocolError, "a new message began inside a fragmented one")
				return
			}
			msg, inMessage, compressed = payload, true, h.Rsv1()
		case ws.OpContinuation:
			if !inMessage {
				s.closeWith(ws.StatusProtocolError, "continuation without a message")
				return
			}
			msg = append(msg, payload...)
		default:
			s.closeWith(ws.StatusProtocolError, "unknown opcode")
			return
		}
		if !h.Fin {
			continue
		}
		inMessage = false
		if compressed {
			// Inflated under the same limit as a plain message.
			p, code, err := s.z.Inflate(msg, max, take)
			if err != nil {
				s.closeWith(code, err.Error())
				return
			}
			msg = p
		}
		s.receive(msg)
		msg = nil
		giveBack()
	}
}

// receive handles one client message.
func (s *watchSession) receive(data []byte) {
	m, err := remotewire.DecodeWatchMessage(data)
	if err != nil {
		s.sendError(remotewire.WatchIDOf(data), opError(codeOpInvalidRequest, err.Error()))
		return
	}
	if m.Kind == remotewire.KindUnwatch {
		// Under the write lock: a run that found the watch registered
		// finishes its write first, and no run writes for it after.
		s.wmu.Lock()
		s.mu.Lock()
		delete(s.watches, m.WatchID)
		s.mu.Unlock()
		s.wmu.Unlock()
		return
	}
	srv := s.hub.s
	s.mu.Lock()
	_, dup := s.watches[m.WatchID]
	n := len(s.watches)
	s.mu.Unlock()
	switch {
	case dup:
		s.sendError(m.WatchID, opError(codeOpInvalidRequest, "watchId is already active"))
		return
	case n >= srv.ops.maxWatch:
		s.sendError(m.WatchID, opError(codeOpInvalidRequest, "the socket has as many watches as the server allows"))
		return
	}
	c := Caller{ActorID: s.actor, Partition: s.partition, ClientID: m.ClientID}
	if err := srv.checkCaller(s.ctx, c); err != nil {
		s.sendError(m.WatchID, operationError(err, codeOpExecutionFailed))
		return
	}
	cq := srv.ops.queries[m.OperationID]
	if cq == nil {
		s.sendError(m.WatchID, opError(codeOpUnknown, "no query is registered as "+m.OperationID))
		return
	}
	if _, err := cq.decodeParams(m.Params); err != nil {
		s.sendError(m.WatchID, operationError(err, codeOpInvalidRequest))
		return
	}
	w := &watchState{id: m.WatchID, caller: c, cq: cq, params: m.Params}
	s.mu.Lock()
	if _, dup := s.watches[m.WatchID]; !dup && !s.closed {
		s.watches[m.WatchID] = w
		s.triggerLocked(w, 0)
	}
	s.mu.Unlock()
}

// triggerLocked reruns a watch for the commits through seq (0: for any
// change), or marks it dirty while a run is in flight (at most one
// pending rerun, skipped when the run in flight read through seq).
func (s *watchSession) triggerLocked(w *watchState, seq int64) {
	if s.closed {
		return
	}
	if w.running {
		w.dirty = true
		if seq == 0 {
			w.dirtyAll = true
		}
		w.dirtyThrough = max(w.dirtyThrough, seq)
		return
	}
	w.running = true
	go s.run(w)
}

// run evaluates a watch until no rerun is pending, sending each result
// unless the watch was removed meanwhile.
func (s *watchSession) run(w *watchState) {
	srv := s.hub.s
	for {
		s.mu.Lock()
		w.dirty, w.dirtyAll, w.dirtyThrough = false, false, 0
		s.mu.Unlock()
		var msg remotewire.Message
		resp, err := srv.runQuery(s.ctx, w.cq, w.caller, w.params)
		if err != nil {
			pe := operationError(err, codeOpQueryFailed)
			srv.reportOperationFailure("operations", pe)
			msg = &remotewire.WatchError{WatchID: w.id, Code: pe.Code, Message: pe.Message, Retryable: pe.Entry().Retryable}
		} else {
			msg = &remotewire.Snapshot{WatchID: w.id, OperationID: resp.OperationID, Rows: resp.Rows, MaxCommitSeq: resp.MaxCommitSeq}
		}
		b, merr := remotewire.Marshal(msg)
		// The write lock is taken before the check that the watch is
		// still registered and held through the write, so that an
		// unwatch (which takes it too) either comes after this result
		// or suppresses it (REMOTE.md §6). The session lock is not held
		// during the write: a slow client never holds up the commit path
		// that dispatches reruns.
		s.wmu.Lock()
		s.mu.Lock()
		if s.closed || s.watches[w.id] != w {
			w.running = false
			s.mu.Unlock()
			s.wmu.Unlock()
			return
		}
		if err == nil {
			w.seen = max(w.seen, resp.MaxCommitSeq)
		}
		send := merr == nil && !bytes.Equal(b, w.last)
		if send {
			w.last = b
		}
		s.mu.Unlock()
		if send {
			if s.beforeWrite != nil {
				s.beforeWrite()
			}
			s.writeLocked(ws.OpBinary, b)
		}
		s.wmu.Unlock()
		s.mu.Lock()
		if !w.settle(err == nil) || s.closed || s.watches[w.id] != w {
			w.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// settle reports, after a run (read: it read a result), whether a rerun
// is pending: not when the commits that asked for it are in the result
// just read (its maxCommitSeq, read in the same snapshot as its rows), as
// a commit listener's late notification of a commit made before the
// watch started, which arrives while the first run reads it.
func (w *watchState) settle(read bool) bool {
	if w.dirty && !w.dirtyAll && read && w.dirtyThrough <= w.seen {
		w.dirty = false
	}
	return w.dirty
}

func (s *watchSession) sendError(watchID string, pe *syncerr.Error) {
	b, err := remotewire.Marshal(&remotewire.WatchError{WatchID: watchID, Code: pe.Code, Message: pe.Message,
		Retryable: pe.Entry().Retryable})
	if err == nil {
		s.write(ws.OpBinary, b)
	}
}

// write sends one frame; a failed write ends the socket. Messages (a
// snapshot, a watch_error) go in binary frames, as the reference server
// sends them: its web client hands only binary messages to the watch
// code and drops text ones.
func (s *watchSession) write(op ws.OpCode, payload []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.writeLocked(op, payload)
}

// writeLocked sends one frame under wmu: a data frame compressed when
// the socket negotiated permessage-deflate and compressing pays.
func (s *watchSession) writeLocked(op ws.OpCode, payload []byte) {
	_ = s.conn.SetWriteDeadline(time.Now().Add(watchWriteTimeout))
	var err error
	if z := s.compressed(op, payload); z != nil {
		_, err = s.conn.Write(z)
	} else {
		err = ws.WriteFrame(s.conn, ws.NewFrame(op, true, payload))
	}
	if err != nil {
		_ = s.conn.Close()
	}
}

// compressed returns payload's frame compressed, or nil when it goes as
// it is (no extension, a control frame, a short or incompressible one).
func (s *watchSession) compressed(op ws.OpCode, payload []byte) []byte {
	if s.z == nil || op.IsControl() {
		return nil
	}
	return s.z.Frame(op, payload)
}

// closeWith ends the socket with a close frame (once).
func (s *watchSession) closeWith(code ws.StatusCode, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	clear(s.watches)
	s.mu.Unlock()
	s.cancel()
	s.write(ws.OpClose, ws.NewCloseFrameBody(code, reason))
	_ = s.conn.Close()
}

// statusTryAgainLater (1013) closes a watch socket whose message would
// take the body budget over its bound, as /realtime closes its sockets:
// the client reconnects and sends it again.
const statusTryAgainLater ws.StatusCode = 1013
