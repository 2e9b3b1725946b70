package realtime

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/wire"
)

// prio says how a frame is bounded by a connection's send queue.
type prio uint8

const (
	// prioData frames (deltas, round chunks, events) are refused when
	// the queue is at its bounds.
	prioData prio = iota
	// prioWake frames (wake-ups) may use a small headroom past the
	// bounds: a consumer too slow for deltas degrades to wakes first.
	prioWake
	// prioClose is the close frame: always queued, last.
	prioClose
)

// wakeHeadroom is the extra room wake-ups may use past the queue bounds.
const (
	wakeHeadroomMsgs  = 4
	wakeHeadroomBytes = 4 << 10
)

// closeLinger is how long a closing connection waits, after its close
// frame is written and its write side shut, for the peer to close its
// side before the socket is released.
const closeLinger = time.Second

// frame is one server→client WebSocket message, already framed, shared
// by every connection it is queued on.
type frame struct {
	b    []byte
	prio prio
	// z, when set, is the same message compressed (RFC 7692), sent
	// instead of b to a connection that negotiated permessage-deflate.
	z []byte
}

func textFrame(payload []byte) frame {
	return frame{b: compileFrame(ws.OpText, payload)}
}

func binaryFrame(payload []byte) frame {
	return frame{b: compileFrame(ws.OpBinary, payload)}
}

func compileFrame(op ws.OpCode, payload []byte) []byte {
	h := ws.Header{Fin: true, OpCode: op, Length: int64(len(payload))}
	out := make([]byte, 0, ws.HeaderSize(h)+len(payload))
	buf := &sliceWriter{b: out}
	_ = ws.WriteHeader(buf, h)
	return append(buf.b, payload...)
}

type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// errQueueFull reports a send refused because the connection is behind.
var errQueueFull = errors.New("send queue full")

// wsConn is one WebSocket connection: the session's reader goroutine
// reads it, and a bounded send queue is drained by a short-lived flusher
// goroutine that exists only while frames are queued.
type wsConn struct {
	nc net.Conn
	rc syscall.RawConn // nc's descriptor, for writes that do not wait; nil when nc has none
	// fc is nc when the hub owns the socket's descriptor (adopt): the
	// poller's events wake its waiting reads and writes.
	fc *fdConn
	// z compresses and inflates messages when the connection negotiated
	// permessage-deflate (nil: it did not). It is the hub's, shared.
	z        *codec
	maxMsgs  int
	maxBytes int
	writeTO  time.Duration
	slow     *atomic.Int64 // counts connections closed for a write timeout

	mu       sync.Mutex
	queue    []frame
	wakeAt   int // index in queue of a wake not yet taken by the flusher, or -1
	queued   int // bytes queued or being written
	flushing bool
	closing  bool // the close frame is queued: nothing more is accepted
	closed   bool
	// quiet is set by a heartbeat tick and cleared by every frame queued
	// (beatDue): a socket that was sent a frame since the last tick needs
	// no heartbeat (§8.5: any frame counts).
	quiet bool
	// sent is closed once the close frame is written, or the socket
	// closed (sentDone); drained is signalled when the queue empties
	// (backpressure). Both are made on first use, under mu (sentC, and
	// send when it refuses a frame): an idle socket has neither.
	sent     chan struct{}
	sentDone bool
	drained  chan struct{}

	// A polled connection (see poller) has no reader goroutine while it
	// is parked; kick starts one when the connection must be read
	// without client bytes (its close linger, a close).
	pollToken int32
	parked    bool
	kick      func()
	// partial holds the start of a client frame the poller read from a
	// parked connection (an ack whose header and payload came in separate
	// segments), taken by whoever reads the connection next; partialAt is
	// when it was kept.
	partial   []byte
	partialAt time.Time
	// takenBinary counts the binary message starts the poller read from
	// the socket that no reader has read as a message yet (readable,
	// readPolled): bytes out of the socket but not yet a round's chunk.
	takenBinary int
}

func newConn(nc net.Conn, maxMsgs, maxBytes int, writeTO time.Duration, slow *atomic.Int64) *wsConn {
	c := &wsConn{nc: nc, maxMsgs: maxMsgs, maxBytes: maxBytes, writeTO: writeTO, slow: slow, wakeAt: -1}
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
	return c
}

// send queues f. It never blocks: a frame over the bounds is refused. A
// wake-up replaces one still queued: wakes are coalescible (§8.3).
func (c *wsConn) send(f frame) error {
	if f.z != nil && c.z != nil {
		f.b = f.z
	}
	f.z = nil
	c.mu.Lock()
	if c.closed || c.closing {
		c.mu.Unlock()
		return net.ErrClosed
	}
	if f.prio == prioWake && c.wakeAt >= 0 {
		c.queued += len(f.b) - len(c.queue[c.wakeAt].b)
		c.queue[c.wakeAt] = f
		c.quiet = false
		c.mu.Unlock()
		return nil
	}
	msgs, bytes := c.maxMsgs, c.maxBytes
	if f.prio == prioWake {
		msgs, bytes = msgs+wakeHeadroomMsgs, bytes+wakeHeadroomBytes
	}
	if len(c.queue) >= msgs || c.queued+len(f.b) > bytes {
		if c.drained == nil {
			// A waiter (waitFor) waits for the drain after this refusal.
			c.drained = make(chan struct{}, 1)
		}
		c.mu.Unlock()
		return errQueueFull
	}
	if f.prio == prioWake {
		c.wakeAt = len(c.queue)
	}
	c.queue = append(c.queue, f)
	c.queued += len(f.b)
	c.quiet = false
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start && !c.writeNow() {
		go c.flush()
	}
	return nil
}

// beatDue runs at each heartbeat tick (every half Heartbeat): it reports
// whether the connection is due a heartbeat, that is whether no frame was
// queued on it since the previous tick. A socket is then sent a frame
// (a heartbeat if nothing else) at least every Heartbeat, as §8.5 asks,
// and a socket that receives deltas is sent no heartbeat at all.
func (c *wsConn) beatDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.quiet {
		c.quiet = true
		return false
	}
	return true
}

// writeNow is the fast path of a send to an idle connection: the frame
// is written on the caller's goroutine by one write that does not wait
// (the socket's buffer takes it, as it nearly always does), so a fan-out
// costs no goroutine per socket. It reports false, with the queue as it
// was, when it cannot try (no descriptor, more than one frame queued, a
// close frame); after a short write the rest goes first in the queue and
// a flusher is started. The caller has set flushing: no other writer runs.
func (c *wsConn) writeNow() bool {
	if c.rc == nil || !rawWrites {
		return false
	}
	c.mu.Lock()
	if c.closed || c.closing || len(c.queue) != 1 {
		c.mu.Unlock()
		return false
	}
	f := c.queue[0]
	// The queue's array is kept for the next frame (one allocation less
	// per delivery), without the frame.
	c.queue[0] = frame{}
	c.queue, c.wakeAt = c.queue[:0], -1
	c.mu.Unlock()
	n, err := 0, error(nil)
	if c.fc != nil {
		n, err = c.fc.writeAvailable(f.b) // no closure through an interface: no allocation
	} else if rerr := c.rc.Write(func(fd uintptr) bool {
		n, err = writeAvailable(fd, f.b)
		return true // never wait for the descriptor here
	}); rerr != nil {
		err = rerr
	}
	if err == syscall.EAGAIN {
		err = nil // the socket's buffer is full: the flusher waits for it
	}
	c.mu.Lock()
	c.queued -= n
	switch {
	case err != nil:
		c.flushing = false
		c.mu.Unlock()
		c.close()
		return true
	case n < len(f.b):
		// A short write: the rest of the frame goes out first.
		c.queue = append([]frame{{b: f.b[n:], prio: prioData}}, c.queue...)
		if c.wakeAt >= 0 {
			c.wakeAt++
		}
	case len(c.queue) == 0:
		c.flushing = false
		drained := c.drained
		c.mu.Unlock()
		signal(drained)
		return true
	}
	c.mu.Unlock()
	go c.flush() // frames queued meanwhile, or the rest of this one
	return true
}

// writeAvailable writes as much of b to the descriptor as its buffer
// takes, without waiting.
func writeAvailable(fd uintptr, b []byte) (n int, err error) {
	for {
		m, werr := rawWrite(fd, b[n:])
		if m > 0 {
			n += m
		}
		if werr == syscall.EINTR || (werr == nil && m > 0 && n < len(b)) {
			continue
		}
		return n, werr
	}
}

// readNow reads what the socket holds without waiting (see readNow).
func (c *wsConn) readNow(buf []byte) (int, error) {
	if c.fc != nil {
		return c.fc.readAvailable(buf)
	}
	return readNow(c.rc, buf)
}

// sendWait queues f, waiting while the queue is over its bounds, for a
// round's response stream (§8.7 backpressure: slow down, never truncate).
// A consumer that takes nothing for the write timeout is refused.
func (c *wsConn) sendWait(f frame) error {
	return c.waitFor(func() error { return c.send(f) })
}

// waitFor retries try while it reports a full queue, waking when the
// queue drains.
func (c *wsConn) waitFor(try func() error) error {
	var timer *time.Timer
	for {
		err := try()
		if !errors.Is(err, errQueueFull) {
			if timer != nil {
				timer.Stop()
			}
			return err
		}
		if timer == nil {
			timer = time.NewTimer(c.writeTO)
		}
		select {
		case <-c.drainedC():
		case <-c.sentC():
			timer.Stop()
			return net.ErrClosed
		case <-timer.C:
			return errQueueFull
		}
	}
}

func (c *wsConn) flush() {
	for {
		c.mu.Lock()
		if c.closed {
			c.flushing = false
			c.mu.Unlock()
			return
		}
		if len(c.queue) == 0 {
			// No write deadline outlives this flusher: writeNow's writes
			// check the descriptor's deadline too, and an expired one
			// failed them (the connection closed, uncounted and without
			// a close frame, WriteTimeout after the flusher's last write).
			// Cleared before flushing is, so never a later flusher's.
			_ = c.nc.SetWriteDeadline(time.Time{})
			c.flushing = false
			closing, drained := c.closing, c.drained
			c.mu.Unlock()
			if closing {
				c.linger()
				return
			}
			signal(drained)
			return
		}
		batch := c.queue
		c.queue, c.wakeAt = nil, -1
		c.mu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTO))
		n := 0
		var err error
		if len(batch) == 1 {
			n = len(batch[0].b)
			_, err = c.nc.Write(batch[0].b)
		} else {
			bufs := make(net.Buffers, len(batch))
			for i, f := range batch {
				bufs[i] = f.b
				n += len(f.b)
			}
			if c.fc != nil {
				_, err = c.fc.writeBuffers(bufs) // net.Buffers writes the hub's sockets one by one
			} else {
				_, err = bufs.WriteTo(c.nc)
			}
		}
		c.mu.Lock()
		c.queued -= n
		c.mu.Unlock()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && c.slow != nil {
				c.slow.Add(1)
			}
			c.close()
			return
		}
	}
}

// linger runs once the close frame is written: the write side is shut, so
// the peer reads the close frame and an orderly end of stream, and the
// reader goroutine (which discards what still arrives) ends the connection
// when the peer closes its side or after closeLinger.
func (c *wsConn) linger() {
	c.markSent()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.mu.Lock()
		_ = c.nc.SetReadDeadline(time.Now().Add(closeLinger))
		c.mu.Unlock()
		c.wakeReader()
		return
	}
	c.close()
}

// wakeReader gives a parked connection a reader goroutine.
func (c *wsConn) wakeReader() {
	c.mu.Lock()
	kick := c.kick
	c.mu.Unlock()
	if kick != nil {
		kick()
	}
}

func (c *wsConn) markSent() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markSentLocked()
}

// markSentLocked closes sent, once. c.mu is held.
func (c *wsConn) markSentLocked() {
	if c.sentDone {
		return
	}
	c.sentDone = true
	if c.sent != nil {
		close(c.sent)
	}
}

// sentC returns sent, closed once the close frame is written or the
// socket closed.
func (c *wsConn) sentC() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent == nil {
		c.sent = make(chan struct{})
		if c.sentDone {
			close(c.sent)
		}
	}
	return c.sent
}

// drainedC returns drained (see send).
func (c *wsConn) drainedC() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drained == nil {
		c.drained = make(chan struct{}, 1)
	}
	return c.drained
}

// signal wakes the waiter of a drained channel, if any (nil: no waiter).
func signal(drained chan struct{}) {
	if drained == nil {
		return
	}
	select {
	case drained <- struct{}{}:
	default:
	}
}

// closeWith ends the connection with a close frame carrying a status and
// reason. Data frames not yet written are dropped: after a revocation or a
// protocol violation nothing more is delivered.
func (c *wsConn) closeWith(code ws.StatusCode, reason string) {
	body := ws.NewCloseFrameBody(code, reason)
	f := frame{b: compileFrame(ws.OpClose, body), prio: prioClose}
	c.mu.Lock()
	if c.closed || c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	for _, q := range c.queue {
		c.queued -= len(q.b)
	}
	c.queue = append(c.queue[:0], f)
	c.queued += len(f.b)
	c.wakeAt = -1
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
}

// isClosing reports whether the connection is closing or closed: its
// reader discards client messages.
func (c *wsConn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing || c.closed
}

// close releases the socket at once.
func (c *wsConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.queue, c.wakeAt = nil, -1
	c.markSentLocked()
	c.mu.Unlock()
	_ = c.nc.Close()
	c.wakeReader() // it ends the session
}

// message is one complete client message.
type message struct {
	op      ws.OpCode
	payload []byte
	// taken is what the message's bytes past the free part took from
	// the hub's body budget (Config.Bodies); whoever keeps the payload
	// gives it back.
	taken int64
}

// errProtocol marks a client frame that breaks RFC 6455.
var errProtocol = errors.New("websocket protocol violation")

// armRead sets the read deadline to d from now, unless the connection is
// closing: its close linger owns the deadline then.
func (c *wsConn) armRead(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.closed {
		return
	}
	if d <= 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
}

// stallReader re-arms the connection's read deadline before each read: a
// message whose bytes stop arriving for the stall timeout ends the
// connection, however long the whole message takes.
type stallReader struct {
	c     *wsConn
	r     io.Reader
	stall time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	s.c.armRead(s.stall)
	return s.r.Read(p)
}

// readMessage reads one complete client message (reassembling fragments),
// answering pings. Payloads over max are refused. Between messages a
// connection may stay silent as long as it likes; once a message has
// begun, each read must make progress within stall. Payload buffers grow
// as bytes arrive, never to a declared length ahead of them.
//
// A data frame's bytes past the message's first BodyFreeBytes are taken
// from budget (nil: unbounded) before they are read; when the budget is
// spent the read fails with errBodyBudget, holding nothing.
func (c *wsConn) readMessage(br *bufio.Reader, max int64, stall time.Duration, budget BodyBudget) (_ message, err error) {
	defer c.armRead(0)
	r := &stallReader{c: c, r: br, stall: stall}
	var out message
	compressed := false
	defer func() {
		if err != nil && out.taken > 0 {
			budget.GiveBody(out.taken)
		}
	}()
	for {
		if out.op == 0 {
			// Between messages (a control frame does not start one) the
			// connection may be silent: wait for a first byte without a
			// deadline, then read the frame under the stall deadline.
			c.armRead(0)
			if _, err := br.Peek(1); err != nil {
				return message{}, err
			}
		}
		h, err := ws.ReadHeader(r)
		if err != nil {
			if errors.Is(err, ws.ErrHeaderLengthMSB) || errors.Is(err, ws.ErrHeaderLengthUnexpected) {
				return message{}, errProtocol
			}
			return message{}, err
		}
		if h.Length > max || int64(len(out.payload))+h.Length > max {
			return message{}, errTooLarge
		}
		if !h.Masked || (h.OpCode.IsControl() && (h.Length > 125 || !h.Fin)) {
			return message{}, errProtocol
		}
		if h.Rsv != 0 {
			// RSV1 only, only on the first frame of a data message, only
			// when permessage-deflate was negotiated (RFC 7692 §6).
			if c.z == nil || h.Rsv != rsv1 || h.OpCode.IsControl() || h.OpCode == ws.OpContinuation {
				return message{}, errProtocol
			}
			compressed = true
		}
		if budget != nil && !h.OpCode.IsControl() {
			if need := int64(len(out.payload)) + h.Length - BodyFreeBytes - out.taken; need > 0 {
				if !budget.TakeBody(need) {
					return message{}, errBodyBudget
				}
				out.taken += need
			}
		}
		payload, err := wire.ReadGrowing(r, int(h.Length))
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return message{}, err
		}
		ws.Cipher(payload, h.Mask, 0)
		switch h.OpCode {
		case ws.OpPing:
			_ = c.send(frame{b: compileFrame(ws.OpPong, payload)}) // a full queue drops the pong
			continue
		case ws.OpPong:
			continue
		case ws.OpClose:
			if out.taken > 0 { // a close inside a fragmented message
				budget.GiveBody(out.taken)
			}
			return message{op: ws.OpClose}, nil
		case ws.OpContinuation:
			if out.op == 0 {
				return message{}, errProtocol
			}
			out.payload = append(out.payload, payload...)
		case ws.OpText, ws.OpBinary:
			if out.op != 0 {
				return message{}, errProtocol
			}
			out.op, out.payload = h.OpCode, payload
		default:
			return message{}, errProtocol
		}
		if h.Fin {
			if compressed {
				var ierr error
				if out, ierr = c.inflate(out, max, budget); ierr != nil {
					return message{}, ierr // the deferred give-back sees what out holds
				}
			}
			return out, nil
		}
	}
}

// inflate replaces a compressed message's payload with its inflated
// bytes, bounded by max as an uncompressed message is; the budget is
// taken for the inflated payload as it grows, and holds exactly its bytes
// past the free part at the end. On error the caller gives back what the
// message holds.
func (c *wsConn) inflate(m message, limit int64, budget BodyBudget) (message, error) {
	reserve := func(n int64) bool {
		need := n - BodyFreeBytes - m.taken
		if need <= 0 || budget == nil {
			return true
		}
		if !budget.TakeBody(need) {
			return false
		}
		m.taken += need
		return true
	}
	p, err := c.z.inflate(m.payload, limit, reserve)
	if err != nil {
		if errors.Is(err, errInflate) {
			err = errProtocol
		}
		return m, err
	}
	m.payload = p
	if extra := m.taken - max(0, int64(len(p))-BodyFreeBytes); extra > 0 {
		budget.GiveBody(extra)
		m.taken -= extra
	}
	return m, nil
}

var errTooLarge = errors.New("message too large")

// errBodyBudget marks a message refused because the body budget
// (Config.Bodies) is spent.
var errBodyBudget = errors.New("request bodies in memory are at their limit")

// BodyFreeBytes is the part of each body (an HTTP request body; here
// each message, and each round's request) not counted against the body
// budget: acks, presence and ordinary rounds are never refused because
// large requests hold it.
const BodyFreeBytes = 64 << 10

// binaryPending reports whether the bytes the client sent and nobody read
// yet hold the start of a binary message (a sync round's chunk: §8.7); the
// frames before it (acks, pings) are skipped. It reads nothing.
//
// Bytes the poller took from the socket for a reader that has not read
// them yet count too (takenBinary): the poller's read and its count are
// one critical section of mu, as this check is, so a request that
// reached the socket before the check is seen in one place or the other.
func (c *wsConn) binaryPending() bool {
	if c.rc == nil {
		return false
	}
	var buf [4096]byte
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.takenBinary > 0 {
		return true
	}
	n := peekNow(c.rc, buf[:])
	return binaryFrameIn(buf[:n])
}

// untakeBinary gives back a count of takenBinary.
func (c *wsConn) untakeBinary() {
	c.mu.Lock()
	c.takenBinary--
	c.mu.Unlock()
}

// binaryFrameIn walks the client frames at the start of b (masked, RFC
// 6455 §5.2) and reports whether one opens a binary message.
func binaryFrameIn(b []byte) bool {
	for len(b) >= 2 {
		if b[0]&0x0f == 0x2 {
			return true
		}
		size, hdr := uint64(b[1]&0x7f), 2
		switch size {
		case 126:
			if len(b) < 4 {
				return false
			}
			size, hdr = uint64(b[2])<<8|uint64(b[3]), 4
		case 127:
			if len(b) < 10 {
				return false
			}
			size = 0
			for _, x := range b[2:10] {
				size = size<<8 | uint64(x)
			}
			hdr = 10
		}
		if b[1]&0x80 != 0 {
			hdr += 4
		}
		if size > uint64(len(b)) || uint64(hdr)+size > uint64(len(b)) {
			return false
		}
		b = b[uint64(hdr)+size:]
	}
	return false
}
