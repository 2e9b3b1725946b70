package realtime

import (
	"bufio"
	"bytes"
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
		bound := int64(maxSel%(1<<20)) + 1
		budget := &fuzzBudget{t: t, limit: int64(limit)}
		c := newConn(discardConn{}, 8, 1<<16, time.Second, nil)
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
			}
			switch m.op {
			case ws.OpText, ws.OpBinary:
			case ws.OpClose:
				return
			default:
				t.Fatalf("message of opcode %v", m.op)
			}
		}
	})
}
