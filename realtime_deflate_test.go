package syncgo_test

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// The permessage-deflate tests (RFC 7692) use their own client: it
// offers the extension by hand, reads frames with RSV1 set and inflates
// them with the standard library (an implementation independent of the
// server's), and sends compressed messages.

// chromeOffer is the Sec-WebSocket-Extensions header Chrome sends.
const chromeOffer = "permessage-deflate; client_max_window_bits"

// deflateTail is what RFC 7692 strips from the end of a compressed message.
const deflateTail = "\x00\x00\xff\xff"

// wireCount counts what a socket read off the wire.
type wireCount struct {
	bytes      atomic.Int64 // frame bytes, headers included
	compressed atomic.Int64 // frames with RSV1
	frames     atomic.Int64
}

// upgradeOffering opens a socket by hand offering the extensions in offer
// (empty: no header) and starts reading it; it returns the socket, the
// response's Sec-WebSocket-Extensions and the counts of what it reads.
func (e *rtEnv) upgradeOffering(token, clientID, offer string) (*rtSock, string, *wireCount) {
	e.t.Helper()
	s, ext := e.handUpgrade(token, clientID, offer, nil)
	wc := &wireCount{}
	go readDeflating(s, wc)
	return s, ext, wc
}

// readDeflating is rtSock.readLoop for a socket that may have negotiated
// permessage-deflate: frames with RSV1 are inflated (compress/flate);
// RSV1 on a socket that did not negotiate it, on a control frame, or RSV2
// and RSV3 end the read with an error.
func readDeflating(s *rtSock, wc *wireCount) {
	defer close(s.done)
	for {
		h, err := ws.ReadHeader(s.r)
		if err != nil {
			s.endErr = err
			return
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(s.r, payload); err != nil {
			s.endErr = err
			return
		}
		wc.bytes.Add(int64(ws.HeaderSize(h)) + h.Length)
		wc.frames.Add(1)
		compressed := h.Rsv1()
		if h.Rsv2() || h.Rsv3() || (compressed && (!s.deflate || h.OpCode.IsControl())) || h.Masked || !h.Fin {
			s.endErr = fmt.Errorf("unexpected server frame header %+v", h)
			return
		}
		switch h.OpCode {
		case ws.OpClose:
			code, reason := ws.ParseCloseFrameData(payload)
			s.endErr = wsutil.ClosedError{Code: code, Reason: reason}
			return
		case ws.OpPing, ws.OpPong:
			continue
		}
		if compressed {
			wc.compressed.Add(1)
			r := flate.NewReader(io.MultiReader(bytes.NewReader(payload), strings.NewReader(deflateTail)))
			payload, err = io.ReadAll(r)
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				s.endErr = fmt.Errorf("inflate: %w", err)
				return
			}
		}
		s.in <- rtMsg{op: h.OpCode, data: payload, at: time.Now(), compressed: compressed}
	}
}

// deflated compresses payload as RFC 7692 §7.2.1 says (the sync flush's
// tail stripped).
func deflated(payload []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	_, _ = w.Write(payload)
	_ = w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte(deflateTail))
}

// writeDeflated sends one masked client message compressed, RSV1 set.
func writeDeflated(w io.Writer, op ws.OpCode, payload []byte) error {
	return writeRawFrame(w, op, ws.Rsv(true, false, false), deflated(payload))
}

// writeRawFrame sends one masked, final client frame with the given RSV bits.
func writeRawFrame(w io.Writer, op ws.OpCode, rsv byte, payload []byte) error {
	f := ws.NewFrame(op, true, append([]byte(nil), payload...))
	f.Header.Rsv = rsv
	return ws.WriteFrame(w, ws.MaskFrameInPlace(f))
}

// TestRealtimeDeflateNegotiation: the extension is accepted without
// context takeover for the offers a server can honour (the first such, in
// the client's order), declined otherwise, and never when turned off.
func TestRealtimeDeflateNegotiation(t *testing.T) {
	const accepted = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
	e := newRTEnv(t)
	for i, c := range []struct{ offer, want string }{
		{chromeOffer, accepted},
		{"permessage-deflate", accepted},
		{"permessage-deflate; client_max_window_bits=10; server_no_context_takeover", accepted},
		{"permessage-deflate; client_no_context_takeover; client_max_window_bits", accepted},
		// A smaller window than the compressor's cannot be honoured:
		// the next offer is.
		{"permessage-deflate; server_max_window_bits=10, permessage-deflate; client_max_window_bits", accepted},
		{"permessage-deflate; server_max_window_bits=10", ""},
		// Accepting server_max_window_bits means echoing it.
		{"permessage-deflate; server_max_window_bits=15", accepted + "; server_max_window_bits=15"},
		{"permessage-deflate; unknown_param", ""},
		{"x-webkit-deflate-frame", ""},
		// A header that does not parse is ignored, as before the
		// extension was negotiated: the upgrade still succeeds.
		{"permessage-deflate; =;", ""},
		{"permessage-deflate, \"x", ""},
		{"", ""},
	} {
		s, got, _ := e.upgradeOffering("alice", fmt.Sprintf("n%d", i), c.offer)
		if got = strings.ReplaceAll(got, " ", ""); got != strings.ReplaceAll(c.want, " ", "") {
			t.Errorf("offer %q: answered %q, want %q", c.offer, got, c.want)
		}
		s.hello()
	}

	off := newRTEnv(t, func(c *syncgo.Config) { c.Realtime.DisableCompression = true })
	s, got, _ := off.upgradeOffering("alice", "off1", chromeOffer)
	if got != "" {
		t.Fatalf("DisableCompression: answered %q, want no extension", got)
	}
	s.hello()
}

// seedRepetitive pushes n tasks of very repetitive rows into p1.
func seedRepetitive(t *testing.T, e *rtEnv, n int) {
	t.Helper()
	b := e.peer("bob", "seed")
	for start := 0; start < n; start += 100 {
		var rows []rtTask
		for i := start; i < min(n, start+100); i++ {
			rows = append(rows, rtTask{id: fmt.Sprintf("task-%05d", i), project: "p1",
				title: fmt.Sprintf("Task number %d of the test project", i),
				notes: strings.Repeat("These notes repeat themselves. ", 6)})
		}
		b.push(fmt.Sprintf("seed-%d", start), rows...)
	}
}

// TestRealtimeDeflateBootstrapRound: a client offering Chrome's header
// gets the extension; its bootstrap round, sent compressed, is served,
// and the response arrives compressed and inflates to the same message
// as an uncompressed socket's. The bytes on the wire are logged.
func TestRealtimeDeflateBootstrapRound(t *testing.T) {
	e := newRTEnv(t)
	const rows = 434
	seedRepetitive(t, e, rows)

	bootstrap := func(clientID, offer string) (*wire.Message, *wireCount, int64) {
		t.Helper()
		s, ext, wc := e.upgradeOffering("alice", clientID, offer)
		if (ext != "") != (offer != "") {
			t.Fatalf("%s: offer %q answered %q", clientID, offer, ext)
		}
		s.hello()
		p := e.peer("alice", clientID)
		s.round(p, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the epoch
		before := wc.bytes.Load()
		m := s.round(p, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
		return m, wc, wc.bytes.Load() - before
	}
	plain, plainWC, plainBytes := bootstrap("plain1", "")
	zm, zWC, zBytes := bootstrap("deflate1", chromeOffer)
	t.Logf("bootstrap of %d rows over the socket: %d bytes uncompressed (%d frames), %d bytes with permessage-deflate (%d frames, %d compressed)",
		rows, plainBytes, plainWC.frames.Load(), zBytes, zWC.frames.Load(), zWC.compressed.Load())

	if plainWC.compressed.Load() != 0 {
		t.Fatalf("a socket that offered nothing got %d compressed frames", plainWC.compressed.Load())
	}
	if zWC.compressed.Load() == 0 {
		t.Fatal("the deflate socket's bootstrap arrived uncompressed")
	}
	if got := rtSegmentRows(t, zm); got != rows {
		t.Fatalf("the deflate socket's bootstrap has %d rows, want %d", got, rows)
	}
	if !reflect.DeepEqual(rtStripHeader(plain), rtStripHeader(zm)) {
		t.Fatalf("the inflated bootstrap differs from the uncompressed one: %v vs %v", rtFrameTypes(zm), rtFrameTypes(plain))
	}
	if zBytes*4 > plainBytes {
		t.Fatalf("bootstrap: %d bytes compressed vs %d plain: want at least 4x less for these repetitive rows", zBytes, plainBytes)
	}
}

// rtSegmentRows counts the rows of a message's inline segments.
func rtSegmentRows(t *testing.T, m *wire.Message) int {
	t.Helper()
	n := 0
	for _, f := range m.Frames {
		if f, ok := f.(*wire.SegmentInline); ok {
			seg, err := wire.DecodeSegment(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range seg.Blocks {
				n += len(b)
			}
		}
	}
	return n
}

// rtStripHeader returns m's frames past RESP_HEADER.
func rtStripHeader(m *wire.Message) []wire.Frame {
	if len(m.Frames) > 0 {
		if _, ok := m.Frames[0].(*wire.RespHeader); ok {
			return m.Frames[1:]
		}
	}
	return m.Frames
}

// cutShort reports whether a write of a message the server refuses
// succeeded or was cut short by the server's close (it closes on the
// frame's header, and may be gone before the payload is all written).
func cutShort(err error) bool {
	return err == nil || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// TestRealtimeDeflateBomb: a small compressed message that inflates past
// the message limit is refused as an oversized message is (1009), without
// the server allocating its inflated size.
func TestRealtimeDeflateBomb(t *testing.T) {
	const limit = 1 << 20
	e := newRTEnv(t, func(c *syncgo.Config) { c.MaxRequestBytes = limit })

	plain, _, _ := e.upgradeOffering("alice", "big1", "")
	plain.hello()
	if err := plain.write(ws.OpBinary, append([]byte{wire.ChannelTagRound}, make([]byte, limit+1)...)); !cutShort(err) {
		t.Fatal(err)
	}
	plain.wantClose(ws.StatusMessageTooBig)

	const inflated = 256 << 20
	payload := make([]byte, inflated)
	payload[0] = wire.ChannelTagRound
	bomb := deflated(payload)
	t.Logf("bomb: %d bytes inflating to %d", len(bomb), inflated)
	s, ext, _ := e.upgradeOffering("alice", "bomb1", chromeOffer)
	if ext == "" {
		t.Fatal("no extension")
	}
	s.hello()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := writeRawFrame(s.nc, ws.OpBinary, ws.Rsv(true, false, false), bomb); !cutShort(err) {
		t.Fatal(err)
	}
	s.wantClose(ws.StatusMessageTooBig)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Fatalf("the refused bomb allocated %d bytes: the inflated size (%d) was not bounded by the limit (%d)", got, inflated, limit)
	}

	// A compressed message under the limit is served: the socket reads it.
	ok, _, _ := e.upgradeOffering("alice", "ok1", chromeOffer)
	ok.hello()
	p := e.peer("alice", "ok1")
	m := ok.round(p, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	if got := rtFrameTypes(m); len(got) < 2 || got[0] != "RESP_HEADER" {
		t.Fatalf("compressed epoch round: %v", got)
	}
}

// TestRealtimeDeflateProtocolErrors: RSV1 on a socket that did not
// negotiate the extension, on a control frame or on a continuation frame
// fails the connection with 1002; so does a compressed message that does
// not inflate.
func TestRealtimeDeflateProtocolErrors(t *testing.T) {
	e := newRTEnv(t)
	cases := deflateProtocolErrors(ws.OpText, wire.Ack{Cursor: 0}.AppendJSON(nil))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ext, _ := e.upgradeOffering("alice", fmt.Sprintf("p%d", i), c.offer)
			s.t = t
			if (ext != "") != (c.offer != "") {
				t.Fatalf("offer %q answered %q", c.offer, ext)
			}
			s.hello()
			if err := c.send(s.nc); err != nil {
				t.Fatal(err)
			}
			s.wantClose(ws.StatusProtocolError)
		})
	}
}

// TestRealtimeDeflateFanout: a delta fanned out to many sockets that
// negotiated the extension is compressed once and reaches each of them
// compressed; a socket without the extension gets the same delta as it is.
func TestRealtimeDeflateFanout(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1", title: "one"})
	const n = 24
	type sock struct {
		s  *rtSock
		wc *wireCount
	}
	var socks []sock
	for i := range n + 1 {
		offer := chromeOffer
		if i == n {
			offer = "" // the last one, plain
		}
		id := fmt.Sprintf("f%d", i)
		s, _, wc := e.upgradeOffering("alice", id, offer)
		s.hello()
		p := e.peer("alice", id)
		s.round(p, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
		m := s.round(p, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
		s.ack(rtCursors(t, m)["s1"])
		s.barrier()
		socks = append(socks, sock{s, wc})
	}
	before := e.srv.RealtimeStats().Compressed
	seq := b.push("c2", rtTask{id: "t2", project: "p1", title: "two", notes: strings.Repeat("a delta worth compressing ", 20)})
	var first []wire.Frame
	for i, k := range socks {
		m := k.s.next(rtWait)
		d := rtDecodeDelta(t, k.s.clientID, m)
		if rows, next := rtDeltaRows(d); len(rows) != 1 || rows[0] != "t2" || next["s1"] != seq {
			t.Fatalf("%s: delta rows %v next %v", k.s.clientID, rows, next)
		}
		if want := i < n; m.compressed != want {
			t.Fatalf("%s: delta compressed %v, want %v", k.s.clientID, m.compressed, want)
		}
		if first == nil {
			first = d.Frames
		} else if !reflect.DeepEqual(first, d.Frames) {
			t.Fatalf("%s: the delta differs from the first socket's", k.s.clientID)
		}
	}
	if got := e.srv.RealtimeStats().Compressed - before; got != 1 {
		t.Fatalf("the delta to %d deflate sockets was compressed %d times, want once", n, got)
	}
}

// TestRealtimeDeflateSSPClient: the test client's RealtimeDeflate (the
// bench's -ws-deflate) negotiates the extension and applies a compressed
// delta.
func TestRealtimeDeflateSSPClient(t *testing.T) {
	e := newRTEnv(t)
	c, err := sspclient.New(e.url, "alice", e.schema, sspclient.Options{ClientID: "sc1", RealtimeDeflate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("s1", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.SyncUntilQuiet(ctx, 10); err != nil {
		t.Fatal(err)
	}
	rt, err := c.DialRealtime(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }()
	if !rt.Deflate {
		t.Fatal("permessage-deflate not negotiated")
	}
	notes := strings.Repeat("compressed on the wire ", 30)
	seq := e.peer("bob", "b1").push("c1", rtTask{id: "t1", project: "p1", title: "one", notes: notes})
	m, err := rt.Next()
	if err != nil {
		t.Fatal(err)
	}
	if m.Delta == nil {
		t.Fatalf("got %+v, want a delta", m)
	}
	if got, err := c.ApplyDelta(m.Delta); err != nil || got != seq {
		t.Fatalf("ApplyDelta: %d %v, want %d", got, err, seq)
	}
	if r, ok := c.Row("tasks", "t1"); !ok || !strings.Contains(fmt.Sprint(r), "compressed on the wire") {
		t.Fatalf("row t1 after the delta: %v %v", r, ok)
	}
}

// deflateProtocolCase is a message a socket that may have negotiated
// permessage-deflate must answer with a 1002 close.
type deflateProtocolCase struct {
	name, offer string
	send        func(w io.Writer) error
}

// deflateProtocolErrors are the RSV bits and bytes that break RFC 7692
// §6 on a socket whose messages are of op (msg one of them, at least 3
// bytes), offered (or not) the extension: RSV1 without it, on a control
// frame or on a continuation, RSV2, and RSV1 on bytes that do not
// inflate.
func deflateProtocolErrors(op ws.OpCode, msg []byte) []deflateProtocolCase {
	rsv1 := ws.Rsv(true, false, false)
	return []deflateProtocolCase{
		{"rsv1 without negotiation", "", func(w io.Writer) error { return writeRawFrame(w, op, rsv1, deflated(msg)) }},
		{"rsv1 on a ping", chromeOffer, func(w io.Writer) error { return writeRawFrame(w, ws.OpPing, rsv1, deflated([]byte("p"))) }},
		{"rsv1 on a continuation", chromeOffer, func(w io.Writer) error {
			f := ws.NewFrame(op, false, deflated(msg[:3]))
			f.Header.Rsv = rsv1
			if err := ws.WriteFrame(w, ws.MaskFrameInPlace(f)); err != nil {
				return err
			}
			c := ws.NewFrame(ws.OpContinuation, true, []byte("x"))
			c.Header.Rsv = rsv1
			return ws.WriteFrame(w, ws.MaskFrameInPlace(c))
		}},
		{"rsv2", chromeOffer, func(w io.Writer) error { return writeRawFrame(w, op, ws.Rsv(false, true, false), msg) }},
		{"not deflate data", chromeOffer, func(w io.Writer) error {
			return writeRawFrame(w, op, rsv1, []byte{0xff, 0xff, 0xff, 0xff, 0xff})
		}},
	}
}
