package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gobwas/ws"
	"github.com/klauspost/compress/flate"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// maxServerMessage bounds a server message the tool's own reader
// assembles (a delta is at most 1 MiB on syncgo by default).
const maxServerMessage = 64 << 20

var (
	errNoPoller       = errors.New("bench: no socket poller on this system")
	errServerFrame    = errors.New("bench: malformed server frame")
	errServerTooLarge = errors.New("bench: server message too large")
)

// serverFrame is the header of a frame from the server (RFC 6455 §5.2).
type serverFrame struct {
	fin bool
	// rsv1: the message is compressed (RFC 7692 §6).
	rsv1   bool
	op     ws.OpCode
	length int
	hdr    int // header bytes
}

// parseServerFrame reads the frame header at the start of b: ok false
// when b holds only part of the header. A server's frames are never
// masked and carry no reserved bits but RSV1, on the first frame of a
// data message, when permessage-deflate was negotiated (deflate); control
// frames are unfragmented and at most 125 bytes.
func parseServerFrame(b []byte, deflate bool) (f serverFrame, ok bool, err error) {
	if len(b) < 2 {
		return f, false, nil
	}
	if rsv := b[0] & 0x70; (rsv != 0 && (!deflate || rsv != 0x40)) || b[1]&0x80 != 0 {
		return f, false, errServerFrame
	}
	f.fin, f.rsv1, f.op = b[0]&0x80 != 0, b[0]&0x40 != 0, ws.OpCode(b[0]&0x0f)
	if f.rsv1 && (f.op.IsControl() || f.op == ws.OpContinuation) {
		return f, false, errServerFrame
	}
	size, hdr := uint64(b[1]&0x7f), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return f, false, nil
		}
		size, hdr = uint64(b[2])<<8|uint64(b[3]), 4
	case 127:
		if len(b) < 10 {
			return f, false, nil
		}
		size = 0
		for _, x := range b[2:10] {
			size = size<<8 | uint64(x)
		}
		hdr = 10
	}
	if f.op.IsControl() && (!f.fin || size > 125) {
		return f, false, errServerFrame
	}
	if size > maxServerMessage {
		return f, false, errServerTooLarge
	}
	f.length, f.hdr = int(size), hdr
	return f, true, nil
}

// consume takes bytes read from a polled socket's connection at (and
// received by the kernel at rx) and handles every message they complete;
// a frame cut short waits for the next bytes. It reports false when the
// connection must end.
func (s *vsocket) consume(b []byte, at, rx time.Time) bool {
	data := b
	if len(s.pending) > 0 {
		s.pending = append(s.pending, b...)
		data = s.pending
	}
	for {
		f, ok, err := parseServerFrame(data, s.deflate)
		if err != nil {
			s.endWhy = err.Error()
			return false
		}
		if !ok || len(data)-f.hdr < f.length {
			break
		}
		payload := data[f.hdr : f.hdr+f.length]
		data = data[f.hdr+f.length:]
		if !s.frame(f, payload, at, rx) {
			return false
		}
	}
	if len(data) > 0 {
		if len(s.pending)+len(data) > maxServerMessage+14 {
			return false
		}
		s.pending = append([]byte(nil), data...)
	} else {
		s.pending = nil
	}
	return true
}

// frame handles one frame: control frames at once, data frames assembled
// into messages.
func (s *vsocket) frame(f serverFrame, payload []byte, at, rx time.Time) bool {
	switch f.op {
	case ws.OpPing:
		return s.rt.Pong(append([]byte(nil), payload...)) == nil
	case ws.OpPong:
		return true
	case ws.OpClose:
		s.endWhy = "close frame " + closeText(payload)
		_ = s.rt.Close()
		return false
	case ws.OpContinuation:
		if s.fragOp == 0 || len(s.frag)+len(payload) > maxServerMessage {
			return false
		}
		s.frag = append(s.frag, payload...)
		if !f.fin {
			return true
		}
		op, msg, z := s.fragOp, s.frag, s.fragZ
		s.fragOp, s.frag, s.fragZ = 0, nil, false
		return s.inflated(op, msg, z, at, rx)
	case ws.OpText, ws.OpBinary:
		if s.fragOp != 0 {
			return false
		}
		if !f.fin {
			s.fragOp, s.fragZ, s.frag = f.op, f.rsv1, append([]byte(nil), payload...)
			return true
		}
		return s.inflated(f.op, payload, f.rsv1, at, rx)
	}
	return false
}

// inflated handles one message, inflating it first when it came
// compressed (z: RSV1 on its first frame).
func (s *vsocket) inflated(op ws.OpCode, b []byte, z bool, at, rx time.Time) bool {
	if !z {
		return s.message(op, b, at, rx)
	}
	p, err := s.r.inflate(b)
	if err != nil {
		s.endWhy = "inflate: " + err.Error()
		return false
	}
	s.r.sockets.inflated.Add(1)
	return s.message(op, p, at, rx)
}

// inflate returns the payload of a compressed server message (RFC 7692
// §7.2.2: the stripped sync-flush tail appended back), with an inflater
// from the runner's pool.
func (r *runner) inflate(c []byte) ([]byte, error) {
	src := io.MultiReader(bytes.NewReader(c), strings.NewReader(inflateEnd))
	fr, _ := r.inflaters.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(src)
	} else if err := fr.(flate.Resetter).Reset(src, nil); err != nil {
		return nil, err
	}
	defer r.inflaters.Put(fr)
	var out bytes.Buffer
	out.Grow(4 * len(c))
	if _, err := io.Copy(&out, io.LimitReader(fr, maxServerMessage+1)); err != nil {
		return nil, err
	}
	if out.Len() > maxServerMessage {
		return nil, errServerTooLarge
	}
	return out.Bytes(), nil
}

// inflateEnd ends a compressed message for the inflater: the sync
// flush's tail the sender stripped, then an empty final stored block, so
// that a whole message ends the stream cleanly.
const inflateEnd = "\x00\x00\xff\xff\x01\x00\x00\xff\xff"

// message handles one server message as readLoop does: a delta is
// applied and acked (§8.2), a wake-up behind the cursor starts a
// recovery pull (§8.3).
func (s *vsocket) message(op ws.OpCode, b []byte, at, rx time.Time) bool {
	s.messages++
	if op == ws.OpText {
		ev, err := wire.ParseServerEvent(b)
		if err != nil {
			s.endWhy = "event: " + err.Error()
			return false
		}
		if w, ok := ev.(wire.Wake); ok {
			s.r.sockets.wakes.Add(1)
			if s.cursor() < w.Cursor {
				s.recoverAsync()
			}
		}
		return true
	}
	if len(b) == 0 {
		return false
	}
	switch b[0] {
	case wire.ChannelTagRound:
		return true
	case wire.ChannelTagDelta:
	default:
		return false
	}
	// The delta is applied from bytes of its own: the reader's buffer is
	// reused for the next round's reads.
	cursor, err := s.c.ApplyDelta(append([]byte(nil), b[1:]...))
	if err != nil {
		if !errors.Is(err, sspclient.ErrDeltaDropped) {
			s.r.fail(err)
		}
		s.recoverAsync()
		return true
	}
	s.r.sockets.deltas.Add(1)
	if cursor >= 0 {
		if err := s.rt.Ack(cursor); err != nil {
			s.endWhy = "ack: " + err.Error()
			return false
		}
		if s.onDelta != nil {
			s.onDelta(s, cursor, at, rx)
		}
	}
	return true
}

// recoverAsync runs a recovery pull on a goroutine of its own (a polled
// socket's reader must not wait for HTTP); one asked for while one runs
// runs after it.
func (s *vsocket) recoverAsync() {
	s.recMu.Lock()
	if s.recovering {
		s.recAgain = true
		s.recMu.Unlock()
		return
	}
	s.recovering = true
	s.recMu.Unlock()
	go func() {
		for {
			_ = s.recover(context.Background())
			s.recMu.Lock()
			if !s.recAgain {
				s.recovering = false
				s.recMu.Unlock()
				return
			}
			s.recAgain = false
			s.recMu.Unlock()
		}
	}()
}

// closeText renders a close frame's payload: its status code and reason.
func closeText(p []byte) string {
	if len(p) < 2 {
		return "(no status)"
	}
	return fmt.Sprintf("%d %q", int(p[0])<<8|int(p[1]), p[2:])
}

// endPolled ends a polled socket: its connection is dropped (if not
// closed already) and done closed, once.
func (s *vsocket) endPolled() {
	s.endOnce.Do(func() {
		_ = s.rt.Drop()
		close(s.done)
	})
}
