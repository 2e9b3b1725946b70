package syncgo_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/remotewire"
)

// The watch socket's permessage-deflate tests (RFC 7692) use a client of
// their own, as the /realtime ones do: it offers the extension in a
// hand-made handshake, inflates frames with RSV1 with the standard
// library, and sends compressed messages.

// opsFrame is one data frame read off a watch socket, its payload
// inflated when it came compressed.
type opsFrame struct {
	op         ws.OpCode
	payload    []byte
	compressed bool
}

// zWatchSock is a watch socket opened by hand.
type zWatchSock struct {
	t       *testing.T
	nc      net.Conn
	ext     string // the response's Sec-WebSocket-Extensions
	in      chan opsFrame
	closed  chan ws.StatusCode // the close frame's code, once
	readErr error
}

// dialWatchOffering opens GET /operations/realtime offering the
// extensions in offer (empty: no header) and starts reading it.
func dialWatchOffering(t *testing.T, e *e2eEnv, token, offer string) *zWatchSock {
	t.Helper()
	host := strings.TrimPrefix(e.url, "http://")
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	req := "GET /operations/realtime HTTP/1.1\r\nHost: " + host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" +
		"\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer " + token + "\r\n"
	if offer != "" {
		req += "Sec-WebSocket-Extensions: " + offer + "\r\n"
	}
	if _, err := nc.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	s := &zWatchSock{t: t, nc: nc, ext: resp.Header.Get("Sec-WebSocket-Extensions"),
		in: make(chan opsFrame, 64), closed: make(chan ws.StatusCode, 1)}
	go s.read(br)
	return s
}

// read reads server frames until the socket ends: RSV1 on a socket that
// did not negotiate the extension, on a control frame, RSV2 or RSV3, a
// masked or fragmented server frame end it with an error.
func (s *zWatchSock) read(br *bufio.Reader) {
	defer close(s.in)
	for {
		h, err := ws.ReadHeader(br)
		if err != nil {
			s.readErr = err
			return
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(br, payload); err != nil {
			s.readErr = err
			return
		}
		compressed := h.Rsv1()
		if h.Rsv2() || h.Rsv3() || (compressed && (s.ext == "" || h.OpCode.IsControl())) || h.Masked || !h.Fin {
			s.readErr = fmt.Errorf("unexpected server frame header %+v", h)
			return
		}
		switch h.OpCode {
		case ws.OpClose:
			code, _ := ws.ParseCloseFrameData(payload)
			s.closed <- code
			return
		case ws.OpPing, ws.OpPong:
			continue
		}
		if compressed {
			r := flate.NewReader(io.MultiReader(bytes.NewReader(payload), strings.NewReader(deflateTail)))
			payload, err = io.ReadAll(r)
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				s.readErr = fmt.Errorf("inflate: %w", err)
				return
			}
		}
		s.in <- opsFrame{op: h.OpCode, payload: payload, compressed: compressed}
	}
}

// next returns the next data frame.
func (s *zWatchSock) next() opsFrame {
	s.t.Helper()
	select {
	case f, ok := <-s.in:
		if !ok {
			select {
			case code := <-s.closed:
				s.t.Fatalf("the watch socket closed with %d", code)
			default:
			}
			s.t.Fatalf("the watch socket ended: %v", s.readErr)
		}
		return f
	case <-time.After(15 * time.Second):
		s.t.Fatal("no watch message")
	}
	return opsFrame{}
}

// wantClose waits for the server's close frame and checks its code.
func (s *zWatchSock) wantClose(code ws.StatusCode) {
	s.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case got := <-s.closed:
			if got != code {
				s.t.Fatalf("closed with %d, want %d", got, code)
			}
			return
		case f, ok := <-s.in:
			if !ok {
				select {
				case got := <-s.closed:
					if got != code {
						s.t.Fatalf("closed with %d, want %d", got, code)
					}
					return
				default:
				}
				s.t.Fatalf("the socket ended without a close frame (%v), want close %d", s.readErr, code)
			}
			s.t.Logf("message before the close: %q", f.payload)
		case <-deadline:
			s.t.Fatalf("no close frame, want %d", code)
		}
	}
}

// watchMessage encodes a watch message.
func watchMessage(t *testing.T, id, op string, params remotewire.Object) []byte {
	t.Helper()
	b, err := remotewire.Encode(nil, remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "watch"},
		{Key: "watchId", Value: id}, {Key: "clientId", Value: "watcher"}, {Key: "operationId", Value: op}, {Key: "params", Value: params}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeWatchFrame decodes a watch message.
func decodeWatchFrame(t *testing.T, f opsFrame) map[string]any {
	t.Helper()
	v, err := remotewire.Decode(f.payload)
	if err != nil {
		t.Fatalf("undecodable watch message %q: %v", f.payload, err)
	}
	return plain(v).(map[string]any)
}

// TestOperationsWatchDeflateNegotiation: the watch socket answers offers
// as /realtime does (the first it can honour, without context takeover),
// Chrome's included, and declines them all when compression is off.
func TestOperationsWatchDeflateNegotiation(t *testing.T) {
	const accepted = "permessage-deflate;server_no_context_takeover;client_no_context_takeover"
	f := newOpsFixture(t, e2eDrivers[0])
	for _, c := range []struct{ offer, want string }{
		{chromeOffer, accepted},
		{"permessage-deflate", accepted},
		{"permessage-deflate; server_max_window_bits=10, permessage-deflate; client_max_window_bits", accepted},
		{"permessage-deflate; server_max_window_bits=10", ""},
		{"permessage-deflate; server_max_window_bits=15", accepted + ";server_max_window_bits=15"},
		{"permessage-deflate; unknown_param", ""},
		{"permessage-deflate; =;", ""}, // does not parse: ignored, the upgrade goes on
		{"", ""},
	} {
		s := dialWatchOffering(t, f.e2eEnv, "alice", c.offer)
		if got := strings.ReplaceAll(s.ext, " ", ""); got != c.want {
			t.Errorf("offer %q: answered %q, want %q", c.offer, got, c.want)
		}
	}
	off := newOpsFixture(t, e2eDrivers[0], func(c *syncgo.Config) { c.Realtime.DisableCompression = true })
	if s := dialWatchOffering(t, off.e2eEnv, "alice", chromeOffer); s.ext != "" {
		t.Fatalf("DisableCompression: answered %q, want no extension", s.ext)
	}
}

// TestOperationsWatchDeflate: on a socket that offered Chrome's header, a
// watch sent compressed (and one sent compressed in two fragments) is
// served; its snapshots, and the rerun after a commit, arrive compressed
// and inflate to the bytes an uncompressed socket gets; a short
// watch_error goes as it is.
func TestOperationsWatchDeflate(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		var rows []map[string]any
		for i := range 30 {
			rows = append(rows, taskRow(fmt.Sprintf("t%02d", i), "p1", "a task title that repeats itself"))
		}
		seed(t, f.e2eEnv, "alice", "tasks", rows...)
		f.awaitWatchListener(t)

		plainSock := dialWatchOffering(t, f.e2eEnv, "alice", "")
		z := dialWatchOffering(t, f.e2eEnv, "alice", chromeOffer)
		if z.ext == "" {
			t.Fatalf("Chrome's offer %q was declined", chromeOffer)
		}
		msg := watchMessage(t, "tasks", "tasksByProject", project("p1"))
		if err := writeRawFrame(plainSock.nc, ws.OpBinary, 0, msg); err != nil {
			t.Fatal(err)
		}
		before := f.srv.RealtimeStats().Compressed
		if err := writeDeflated(z.nc, ws.OpBinary, msg); err != nil {
			t.Fatal(err)
		}
		want := plainSock.next()
		got := z.next()
		if want.compressed {
			t.Fatal("a socket that offered nothing got a compressed frame")
		}
		if m := decodeWatchFrame(t, got); m["kind"] != "snapshot" || len(snapshotIDs(t, m)) != 30 {
			t.Fatalf("the compressed watch was answered %v, want a snapshot of 30 rows", m)
		}
		if !got.compressed || got.op != ws.OpBinary {
			t.Fatalf("snapshot of %d bytes: compressed %v, op %v; want a compressed binary frame", len(got.payload), got.compressed, got.op)
		}
		if !bytes.Equal(got.payload, want.payload) {
			t.Fatalf("the inflated snapshot differs from the plain socket's:\n%q\n%q", got.payload, want.payload)
		}
		if n := f.srv.RealtimeStats().Compressed - before; n < 1 {
			t.Fatalf("syncgo_realtime_compressed_total rose by %d, want at least 1", n)
		}

		// A rerun after a commit: compressed too, the same bytes.
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t99", "p1", "one more"))
		want, got = plainSock.next(), z.next()
		if !got.compressed || !bytes.Equal(got.payload, want.payload) {
			t.Fatalf("rerun: compressed %v, equal to the plain socket's %v", got.compressed, bytes.Equal(got.payload, want.payload))
		}
		if ids := snapshotIDs(t, decodeWatchFrame(t, got)); len(ids) != 31 {
			t.Fatalf("rerun snapshot has %d rows, want 31", len(ids))
		}

		// A compressed message in two fragments: RSV1 on the first only.
		second := watchMessage(t, "again", "tasksByProject", project("p1"))
		c := deflated(second)
		first := ws.NewFrame(ws.OpBinary, false, append([]byte(nil), c[:len(c)/2]...))
		first.Header.Rsv = ws.Rsv(true, false, false)
		if err := ws.WriteFrame(z.nc, ws.MaskFrameInPlace(first)); err != nil {
			t.Fatal(err)
		}
		if err := ws.WriteFrame(z.nc, ws.MaskFrameInPlace(ws.NewFrame(ws.OpContinuation, true, append([]byte(nil), c[len(c)/2:]...)))); err != nil {
			t.Fatal(err)
		}
		if m := decodeWatchFrame(t, z.next()); m["kind"] != "snapshot" || m["watchId"] != "again" {
			t.Fatalf("the fragmented compressed watch was answered %v", m)
		}

		// A watch_error is short: it goes as it is.
		if err := writeDeflated(z.nc, ws.OpBinary, watchMessage(t, "nope", "noSuchQuery", nil)); err != nil {
			t.Fatal(err)
		}
		fr := z.next()
		if m := decodeWatchFrame(t, fr); m["kind"] != "watch_error" || m["code"] != "operation.unknown" {
			t.Fatalf("message %v, want watch_error operation.unknown", m)
		}
		if fr.compressed && len(fr.payload) < 128 {
			t.Fatalf("a %d-byte watch_error came compressed", len(fr.payload))
		}
	})
}

// TestOperationsWatchDeflateBomb: a small compressed message inflating
// far past the socket's message limit is refused as an oversized plain
// one is (1009), without the server allocating its inflated size; a
// compressed message inflating just past the limit is refused too.
func TestOperationsWatchDeflateBomb(t *testing.T) {
	f := newOpsFixture(t, e2eDrivers[0]) // the limit is 4 KiB
	const limit = 4 << 10

	plainSock := dialWatchOffering(t, f.e2eEnv, "alice", "")
	if err := writeRawFrame(plainSock.nc, ws.OpBinary, 0, make([]byte, limit+1)); !cutShort(err) {
		t.Fatal(err)
	}
	plainSock.wantClose(ws.StatusMessageTooBig)

	over := dialWatchOffering(t, f.e2eEnv, "alice", chromeOffer)
	if err := writeDeflated(over.nc, ws.OpBinary, make([]byte, limit+1)); !cutShort(err) {
		t.Fatal(err)
	}
	over.wantClose(ws.StatusMessageTooBig)

	const inflated = 256 << 20
	bomb := deflated(make([]byte, inflated))
	t.Logf("bomb: %d bytes inflating to %d", len(bomb), inflated)
	s := dialWatchOffering(t, f.e2eEnv, "alice", chromeOffer)
	if s.ext == "" {
		t.Fatal("no extension")
	}
	// The bomb is sent in frames under the limit (the compressed size is
	// what the frame header's check sees).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	first := true
	for len(bomb) > 0 {
		n := min(len(bomb), limit/2)
		fr := ws.NewFrame(ws.OpContinuation, n == len(bomb), append([]byte(nil), bomb[:n]...))
		if first {
			fr.Header.OpCode, fr.Header.Rsv, first = ws.OpBinary, ws.Rsv(true, false, false), false
		}
		bomb = bomb[n:]
		if err := ws.WriteFrame(s.nc, ws.MaskFrameInPlace(fr)); err != nil {
			if !cutShort(err) {
				t.Fatal(err)
			}
			break
		}
	}
	s.wantClose(ws.StatusMessageTooBig)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Fatalf("the refused bomb allocated %d bytes: the inflated size (%d) was not bounded by the limit (%d)", got, inflated, limit)
	}
}

// TestOperationsWatchDeflateProtocolErrors: RSV1 on a socket that did not
// negotiate the extension, on a control frame or on a continuation, RSV2,
// and a compressed message that does not inflate fail the socket with
// 1002.
func TestOperationsWatchDeflateProtocolErrors(t *testing.T) {
	f := newOpsFixture(t, e2eDrivers[0])
	for _, c := range deflateProtocolErrors(ws.OpBinary, watchMessage(t, "w", "tasksByProject", project("p1"))) {
		t.Run(c.name, func(t *testing.T) {
			s := dialWatchOffering(t, f.e2eEnv, "alice", c.offer)
			s.t = t
			if (s.ext != "") != (c.offer != "") {
				t.Fatalf("offer %q answered %q", c.offer, s.ext)
			}
			if err := c.send(s.nc); err != nil {
				t.Fatal(err)
			}
			s.wantClose(ws.StatusProtocolError)
		})
	}
}

// TestOperationsWatchBodyBudget: a watch socket's messages, plain or
// compressed, hold the body budget (MaxBodyMemory) past their first
// 64 KiB as /realtime's do: while another socket's half-sent message
// holds most of it, a large plain message and a small compressed one
// inflating large close their sockets with 1013; a small message is
// still served; the budget is whole again once the sockets are gone.
func TestOperationsWatchBodyBudget(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		const budget = 1 << 20
		f := newOpsFixture(t, d, func(c *syncgo.Config) {
			c.MaxRequestBytes, c.MaxBodyMemory, c.Operations.MaxRequestBytes = budget, budget, budget
		})
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
		f.awaitWatchListener(t)

		// The holder: the first 900 KiB of a fragmented message.
		holder := dialWatchOffering(t, f.e2eEnv, "alice", "")
		if err := ws.WriteFrame(holder.nc, ws.MaskFrameInPlace(ws.NewFrame(ws.OpBinary, false, make([]byte, 900<<10)))); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the held message to be counted", func() bool { return f.srv.BodyMemoryInUseForTest() >= 800<<10 })

		big := dialWatchOffering(t, f.e2eEnv, "alice", "")
		if err := writeRawFrame(big.nc, ws.OpBinary, 0, make([]byte, 300<<10)); !cutShort(err) {
			t.Fatal(err)
		}
		big.wantClose(statusTryAgainLater)

		z := dialWatchOffering(t, f.e2eEnv, "alice", chromeOffer)
		if err := writeDeflated(z.nc, ws.OpBinary, make([]byte, 300<<10)); err != nil {
			t.Fatal(err)
		}
		z.wantClose(statusTryAgainLater)

		small := dialWatchOffering(t, f.e2eEnv, "alice", chromeOffer)
		if err := writeDeflated(small.nc, ws.OpBinary, watchMessage(t, "w", "tasksByProject", project("p1"))); err != nil {
			t.Fatal(err)
		}
		if m := decodeWatchFrame(t, small.next()); m["kind"] != "snapshot" {
			t.Fatalf("a small message while the budget is held: %v, want a snapshot", m)
		}

		_ = holder.nc.Close()
		eventually(t, "the budget to be given back", func() bool { return f.srv.BodyMemoryInUseForTest() == 0 })
	})
}

// statusTryAgainLater is the close code of a socket refused for want of
// body memory (1013).
const statusTryAgainLater ws.StatusCode = 1013
