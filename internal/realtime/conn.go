package realtime

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// frame is one server→client WebSocket message, already framed, shared
// by every connection it is queued on.
type frame struct {
	b []byte
	// control marks frames that bypass the data queue bound (close).
	control bool
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
	buf := newSliceWriter(out)
	_ = ws.WriteHeader(buf, h)
	return append(buf.b, payload...)
}

type sliceWriter struct{ b []byte }

func newSliceWriter(b []byte) *sliceWriter { return &sliceWriter{b: b} }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// errQueueFull reports a send refused because the connection is behind.
var errQueueFull = errors.New("send queue full")

// wsConn is one WebSocket connection: a reader goroutine that delivers
// messages to its handler, and a bounded send queue drained on demand.
type wsConn struct {
	nc       net.Conn
	maxMsgs  int
	maxBytes int
	writeTO  time.Duration

	mu       sync.Mutex
	queue    []frame
	queued   int
	flushing bool
	closed   bool
	done     chan struct{} // closed when the connection is closed
	drained  chan struct{} // signalled when the queue empties (backpressure)
}

func newConn(nc net.Conn, maxMsgs, maxBytes int, writeTO time.Duration) *wsConn {
	return &wsConn{nc: nc, maxMsgs: maxMsgs, maxBytes: maxBytes, writeTO: writeTO,
		done: make(chan struct{}), drained: make(chan struct{}, 1)}
}

// send queues f. It never blocks: a full queue refuses the frame.
func (c *wsConn) send(f frame) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	if !f.control && (len(c.queue) >= c.maxMsgs || c.queued+len(f.b) > c.maxBytes) {
		c.mu.Unlock()
		return errQueueFull
	}
	c.queue = append(c.queue, f)
	c.queued += len(f.b)
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
	return nil
}

// sendWait queues f, waiting while the queue is over its bounds, for a
// round's response stream (§8.7 backpressure: slow down, never truncate).
func (c *wsConn) sendWait(f frame) error {
	for {
		err := c.send(f)
		if !errors.Is(err, errQueueFull) {
			return err
		}
		select {
		case <-c.drained:
		case <-c.done:
			return net.ErrClosed
		case <-time.After(c.writeTO):
			return errQueueFull
		}
	}
}

// pending reports the queued byte count.
func (c *wsConn) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

func (c *wsConn) flush() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.closed {
			c.flushing = false
			c.mu.Unlock()
			select {
			case c.drained <- struct{}{}:
			default:
			}
			return
		}
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.writeTO))
		bufs := make(net.Buffers, len(batch))
		n := 0
		for i, f := range batch {
			bufs[i] = f.b
			n += len(f.b)
		}
		_, err := bufs.WriteTo(c.nc)
		c.mu.Lock()
		c.queued -= n
		c.mu.Unlock()
		if err != nil {
			c.close()
			return
		}
	}
}

// closeWith sends a close frame with a status and reason, then closes.
func (c *wsConn) closeWith(code ws.StatusCode, reason string) {
	body := ws.NewCloseFrameBody(code, reason)
	f := frame{b: compileFrame(ws.OpClose, body), control: true}
	if c.send(f) == nil {
		go func() {
			select {
			case <-c.drained:
			case <-time.After(time.Second):
			}
			c.close()
		}()
		return
	}
	c.close()
}

func (c *wsConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
}

// message is one complete client message.
type message struct {
	op      ws.OpCode
	payload []byte
}

// readMessage reads one complete client message (reassembling fragments),
// answering pings. Payloads over max are refused.
func (c *wsConn) readMessage(r *bufio.Reader, max int64) (message, error) {
	var out message
	for {
		h, err := ws.ReadHeader(r)
		if err != nil {
			return message{}, err
		}
		if h.Length > max || int64(len(out.payload))+h.Length > max {
			return message{}, errTooLarge
		}
		if !h.Masked {
			return message{}, ws.ErrProtocolMaskRequired
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(r, payload); err != nil {
			return message{}, err
		}
		ws.Cipher(payload, h.Mask, 0)
		switch h.OpCode {
		case ws.OpPing:
			_ = c.send(frame{b: compileFrame(ws.OpPong, payload), control: true})
			continue
		case ws.OpPong:
			continue
		case ws.OpClose:
			return message{op: ws.OpClose}, nil
		case ws.OpContinuation:
			if out.op == 0 {
				return message{}, ws.ErrProtocolContinuationUnexpected
			}
			out.payload = append(out.payload, payload...)
		default:
			if out.op != 0 {
				return message{}, ws.ErrProtocolContinuationExpected
			}
			out.op, out.payload = h.OpCode, payload
		}
		if h.Fin {
			return out, nil
		}
	}
}

var errTooLarge = errors.New("message too large")
