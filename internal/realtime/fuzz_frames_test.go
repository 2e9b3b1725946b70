package realtime

import (
	"bufio"
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/wire"
)

// discardConn is a net.Conn whose writes (pongs) vanish and whose
// deadlines do nothing: readMessage reads from the bufio.Reader it is
// given, never from the connection.
type discardConn struct{}

func (discardConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (discardConn) Close() error                     { return nil }
func (discardConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (discardConn) SetDeadline(time.Time) error      { return nil }
func (discardConn) SetReadDeadline(time.Time) error  { return nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzBudget is a BodyBudget that counts what is held and fails the test
// on a give-back of bytes never taken.
type fuzzBudget struct {
	t     *testing.T
	held  int64
	limit int64
}

func (b *fuzzBudget) TakeBody(n int64) bool {
	if n <= 0 {
		b.t.Fatalf("TakeBody(%d)", n)
	}
	if b.held+n > b.limit {
		return false
	}
	b.held += n
	return true
}

func (b *fuzzBudget) GiveBody(n int64) {
	b.held -= n
	if n <= 0 || b.held < 0 {
		b.t.Fatalf("GiveBody(%d) leaves %d held", n, b.held)
	}
}

func maskedFrames(tb testing.TB, frames ...ws.Frame) []byte {
	tb.Helper()
	var b bytes.Buffer
	for _, f := range frames {
		if err := ws.WriteFrame(&b, ws.MaskFrame(f)); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Bytes()
}

// FuzzReadMessage feeds arbitrary client bytes to the WebSocket reader
// (readMessage), the poller's ack reader (maskedAck) and its binary
// message sniffer (binaryFrameIn). The reader never returns a payload over
// its bound; the body budget is balanced (an error holds nothing, a
// message holds exactly its bytes past the free part); maskedAck takes a
// frame only when readMessage reads the same ack from the same bytes; and
// a binary message readMessage reads is one binaryFrameIn sees.
func FuzzReadMessage(f *testing.F) {
	ack := wire.Ack{Cursor: 42}.AppendJSON(nil)
	f.Add(maskedFrames(f, ws.NewTextFrame(ack)), uint32(1<<20), uint32(1<<20))
	f.Add(maskedFrames(f, ws.NewPingFrame([]byte("p")), ws.NewTextFrame(ack), ws.NewBinaryFrame([]byte{1, 2})), uint32(1<<20), uint32(0))
	f.Add(maskedFrames(f, ws.NewFrame(ws.OpText, false, []byte(`{"type":`)), ws.NewFrame(ws.OpContinuation, true, []byte(`"ping"}`))),
		uint32(64), uint32(0))
	f.Add(maskedFrames(f, ws.NewFrame(ws.OpBinary, false, []byte{1}), ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusNormalClosure, "x"))),
		uint32(1<<20), uint32(10))
	// A declared length of 100000 bytes that never arrives.
	f.Add([]byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 1, 0x86, 0xa0, 1, 2, 3, 4, 5}, uint32(1<<20), uint32(1<<20))
	f.Add([]byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 1, 0x86, 0xa0, 1, 2, 3, 4, 5}, uint32(1<<20), uint32(100))
	f.Fuzz(func(t *testing.T, data []byte, maxSel, limit uint32) {
		fuzzReadMessage(t, data, maxSel, limit, nil)
	})
}

// deflatedFrame is a masked client frame of payload compressed (RFC 7692),
// RSV1 set; fin false starts a fragmented message.
func deflatedFrame(tb testing.TB, op ws.OpCode, fin bool, payload []byte) ws.Frame {
	tb.Helper()
	var b bytes.Buffer
	w, err := stdflate.NewWriter(&b, stdflate.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = w.Write(payload)
	_ = w.Flush()
	f := ws.NewFrame(op, fin, bytes.TrimSuffix(b.Bytes(), []byte(deflateTail)))
	f.Header.Rsv = rsv1
	return f
}

// FuzzReadMessageDeflate is FuzzReadMessage on a connection that
// negotiated permessage-deflate: compressed messages (RSV1) are inflated
// within the same bound and budget, and one readMessage returns inflates
// (with the standard library's inflater) to the payload it returns.
func FuzzReadMessageDeflate(f *testing.F) {
	ack := wire.Ack{Cursor: 42}.AppendJSON(nil)
	big := bytes.Repeat([]byte("syncgo "), 40000)
	f.Add(maskedFrames(f, deflatedFrame(f, ws.OpText, true, ack)), uint32(1<<20), uint32(1<<20))
	f.Add(maskedFrames(f, ws.NewTextFrame(ack), deflatedFrame(f, ws.OpBinary, true, append([]byte{1}, big...))), uint32(1<<20), uint32(1<<20))
	f.Add(maskedFrames(f, deflatedFrame(f, ws.OpBinary, true, append([]byte{1}, big...))), uint32(1000), uint32(1<<20))
	f.Add(maskedFrames(f, deflatedFrame(f, ws.OpBinary, true, append([]byte{1}, big...))), uint32(1<<20), uint32(100))
	// A fragmented compressed message: RSV1 on its first frame only.
	whole := deflatedFrame(f, ws.OpText, true, []byte(`{"type":"presence","action":"join","scopeKey":"k"}`))
	half := len(whole.Payload) / 2
	first := ws.NewFrame(ws.OpText, false, whole.Payload[:half])
	first.Header.Rsv = rsv1
	f.Add(maskedFrames(f, first, ws.NewPingFrame([]byte("p")), ws.NewFrame(ws.OpContinuation, true, whole.Payload[half:])), uint32(1<<20), uint32(0))
	// RSV1 on a continuation, on a control frame; not deflate data.
	cont := ws.NewFrame(ws.OpContinuation, true, []byte{1})
	cont.Header.Rsv = rsv1
	f.Add(maskedFrames(f, ws.NewFrame(ws.OpText, false, []byte("x")), cont), uint32(1<<20), uint32(0))
	ping := ws.NewPingFrame([]byte("p"))
	ping.Header.Rsv = rsv1
	f.Add(maskedFrames(f, ping), uint32(1<<20), uint32(0))
	junk := ws.NewTextFrame([]byte{0xff, 0xfe, 0xfd})
	junk.Header.Rsv = rsv1
	f.Add(maskedFrames(f, junk), uint32(1<<20), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, maxSel, limit uint32) {
		fuzzReadMessage(t, data, maxSel, limit, &codec{})
	})
}

// fuzzReadMessage is the body of the frame fuzzers; z is the connection's
// codec (nil: permessage-deflate not negotiated).
func fuzzReadMessage(t *testing.T, data []byte, maxSel, limit uint32, z *codec) {
	bound := int64(maxSel%(1<<20)) + 1
	budget := &fuzzBudget{t: t, limit: int64(limit)}
	c := newConn(discardConn{}, 8, 1<<16, time.Second, nil)
	c.z = z
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, readBufferSize)
	cursor, ackSize, isAck := maskedAck(data)
	// The poller takes acks under any message bound of 125 bytes or more.
	isAck = isAck && int64(ackSize-6) <= bound
	for i := 0; ; i++ {
		m, err := c.readMessage(br, bound, time.Second, budget)
		if err != nil {
			if budget.held != 0 {
				t.Fatalf("the read failed (%v) holding %d bytes of the budget", err, budget.held)
			}
			if i == 0 && isAck {
				t.Fatalf("maskedAck takes an ack (%d) that readMessage refuses: %v", cursor, err)
			}
			if _, ok := stdInflated(data, bound); i == 0 && z != nil && ok && !errors.Is(err, errBodyBudget) && !errors.Is(err, errTooLarge) {
				t.Fatalf("a compressed message the standard library inflates is refused: %v", err)
			}
			return
		}
		if int64(len(m.payload)) > bound {
			t.Fatalf("a %d-byte message over the bound %d", len(m.payload), bound)
		}
		if m.taken != budget.held {
			t.Fatalf("the message says it holds %d, the budget holds %d", m.taken, budget.held)
		}
		want := int64(0)
		if m.op != ws.OpClose {
			want = max(0, int64(len(m.payload))-BodyFreeBytes)
		}
		if m.taken != want {
			t.Fatalf("a %d-byte %v message holds %d of the budget, want %d", len(m.payload), m.op, m.taken, want)
		}
		if m.taken > 0 {
			budget.GiveBody(m.taken)
		}
		if i == 0 {
			consumed := len(data) - src.Len() - br.Buffered()
			if isAck {
				got, ok := wire.ParseAckFast(m.payload)
				if m.op != ws.OpText || !ok || got != cursor || consumed != ackSize {
					t.Fatalf("maskedAck: cursor %d in %d bytes; readMessage: %v %q in %d bytes", cursor, ackSize, m.op, m.payload, consumed)
				}
			}
			if m.op == ws.OpBinary && !binaryFrameIn(data) {
				t.Fatalf("readMessage reads a binary message that binaryFrameIn misses")
			}
			if want, ok := stdInflated(data, bound); ok && !bytes.Equal(m.payload, want) {
				t.Fatalf("the compressed message inflates to %d bytes, readMessage returned %d", len(want), len(m.payload))
			}
		}
		switch m.op {
		case ws.OpText, ws.OpBinary:
		case ws.OpClose:
			return
		default:
			t.Fatalf("message of opcode %v", m.op)
		}
	}
}

// stdInflated inflates with the standard library the message of data's
// first frame when it is a whole compressed data message (RSV1, fin) that
// inflates within bound; false otherwise.
func stdInflated(data []byte, bound int64) ([]byte, bool) {
	r := bytes.NewReader(data)
	h, err := ws.ReadHeader(r)
	if err != nil || h.Rsv != rsv1 || !h.Fin || !h.Masked || (h.OpCode != ws.OpText && h.OpCode != ws.OpBinary) ||
		h.Length > int64(r.Len()) {
		return nil, false
	}
	payload := make([]byte, h.Length)
	_, _ = io.ReadFull(r, payload)
	ws.Cipher(payload, h.Mask, 0)
	fr := stdflate.NewReader(io.MultiReader(bytes.NewReader(payload), bytes.NewReader([]byte(inflateEnd))))
	out, err := io.ReadAll(io.LimitReader(fr, bound+1))
	if err != nil || int64(len(out)) > bound {
		return nil, false
	}
	return out, true
}
