package syncgo_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/remotewire"
)

// browserWatchSock is a watch socket opened the way Chrome opens the
// reference web client's one (webSocketRemoteOperationConnector): the
// handshake headers Chrome sends, client messages as binary frames, and
// every server frame kept with its opcode, since that client reads only
// binary messages (text ones are dropped without a word).
type browserWatchSock struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	// deflate: the server accepted Chrome's permessage-deflate offer.
	deflate bool
}

type watchFrame struct {
	op  ws.OpCode
	msg map[string]any
	// compressed: the frame had RSV1 (permessage-deflate).
	compressed bool
	size       int // the inflated payload's length
}

func dialBrowserWatch(t *testing.T, e *e2eEnv, token string) *browserWatchSock {
	t.Helper()
	host := strings.TrimPrefix(e.url, "http://")
	// The headers Chrome 156 sent on the handshake of /operations/realtime
	// (logged through the DevTools protocol), with the page on the
	// server's own origin and the token in the Authorization header the
	// fixture reads.
	h := http.Header{
		"Origin":          {"http://" + host},
		"Cache-Control":   {"no-cache"},
		"Pragma":          {"no-cache"},
		"Accept-Encoding": {"gzip, deflate, br, zstd"},
		"Accept-Language": {"en-US,en;q=0.9"},
		"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36"},
		"Authorization":   {"Bearer " + token},
	}
	// Chrome's Sec-WebSocket-Extensions: the dialer writes the header
	// and checks that the answer is one of its offers.
	offer, ok := httphead.ParseOptions([]byte(chromeOffer), nil)
	if !ok {
		t.Fatal("Chrome's offer does not parse")
	}
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(h), Extensions: offer}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, br, hs, err := d.Dial(ctx, "ws://"+host+"/operations/realtime")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var r io.Reader = conn
	if br != nil {
		r = io.MultiReader(br, conn)
	}
	deflate := false
	for _, e := range hs.Extensions {
		deflate = deflate || string(e.Name) == "permessage-deflate"
	}
	return &browserWatchSock{t: t, conn: conn, br: bufio.NewReader(r), deflate: deflate}
}

// sendBinary sends one client message as a masked binary frame, as the
// reference client does (socket.send(ArrayBuffer)).
func (s *browserWatchSock) sendBinary(m remotewire.Object) {
	s.t.Helper()
	b, err := remotewire.Encode(nil, m)
	if err != nil {
		s.t.Fatal(err)
	}
	f := ws.MaskFrameInPlace(ws.NewFrame(ws.OpBinary, true, b))
	if err := ws.WriteFrame(s.conn, f); err != nil {
		s.t.Fatal(err)
	}
}

// next reads the next data frame (pings and pongs are skipped).
func (s *browserWatchSock) next() watchFrame {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		f, err := ws.ReadFrame(s.br)
		if err != nil {
			s.t.Fatalf("reading a watch frame: %v", err)
		}
		if f.Header.OpCode.IsControl() {
			if f.Header.OpCode == ws.OpClose {
				s.t.Fatalf("the watch socket closed: %q", f.Payload)
			}
			continue
		}
		compressed := f.Header.Rsv1()
		if f.Header.Rsv2() || f.Header.Rsv3() || (compressed && !s.deflate) {
			s.t.Fatalf("frame with reserved bits %b (permessage-deflate negotiated: %v)", f.Header.Rsv, s.deflate)
		}
		if compressed {
			p, err := io.ReadAll(flate.NewReader(io.MultiReader(bytes.NewReader(f.Payload), strings.NewReader(deflateTail))))
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				s.t.Fatalf("inflate: %v", err)
			}
			f.Payload = p
		}
		v, err := remotewire.Decode(f.Payload)
		if err != nil {
			s.t.Fatalf("undecodable watch message %q: %v", f.Payload, err)
		}
		return watchFrame{op: f.Header.OpCode, msg: plain(v).(map[string]any), compressed: compressed, size: len(f.Payload)}
	}
}

func opName(op ws.OpCode) string {
	switch op {
	case ws.OpText:
		return "text"
	case ws.OpBinary:
		return "binary"
	}
	return "other"
}

// TestOperationsWatchFramesAreBinary: the reference web client's watch
// connector hands only binary messages (ArrayBuffer) to the client and
// drops text ones, as the reference server sends its watch messages as
// bytes. A snapshot or a watch_error sent as a text frame never reaches a
// browser app: its watch stays silent forever.
func TestOperationsWatchFramesAreBinary(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
		f.awaitWatchListener(t)
		w := dialBrowserWatch(t, f.e2eEnv, "alice")
		if !w.deflate {
			t.Fatal("the server declined Chrome's permessage-deflate offer")
		}
		watch := func(id, op string, params remotewire.Object) {
			w.sendBinary(remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "watch"},
				{Key: "watchId", Value: id}, {Key: "clientId", Value: "browser"}, {Key: "operationId", Value: op},
				{Key: "params", Value: params}})
		}

		watch("tasks", "tasksByProject", project("p1"))
		fr := w.next()
		if fr.msg["kind"] != "snapshot" || fr.msg["watchId"] != "tasks" {
			t.Fatalf("first message %v, want the snapshot of watch tasks", fr.msg)
		}
		if fr.op != ws.OpBinary {
			t.Errorf("the snapshot came in a %s frame; the reference web client reads binary frames only", opName(fr.op))
		}

		// A rerun after a commit, as a browser app sees it.
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t2", "p1", "two"))
		fr = w.next()
		if got := snapshotIDs(t, fr.msg); strings.Join(got, ",") != "t1,t2" {
			t.Fatalf("rerun snapshot ids %v, want t1,t2", got)
		}
		if fr.op != ws.OpBinary {
			t.Errorf("the rerun snapshot came in a %s frame, want binary", opName(fr.op))
		}
		// Messages of 128 bytes or more come compressed (RSV1 on the
		// binary frame, as Chrome inflates it), shorter ones as they are.
		if want := fr.size >= 128; fr.compressed != want {
			t.Errorf("a %d-byte snapshot came compressed: %v, want %v", fr.size, fr.compressed, want)
		}
		t.Logf("rerun snapshot: %d bytes, compressed %v", fr.size, fr.compressed)

		watch("nope", "noSuchQuery", nil)
		fr = w.next()
		if fr.msg["kind"] != "watch_error" || fr.msg["code"] != "operation.unknown" {
			t.Fatalf("message %v, want watch_error operation.unknown", fr.msg)
		}
		if fr.op != ws.OpBinary {
			t.Errorf("the watch_error came in a %s frame, want binary", opName(fr.op))
		}
	})
}
