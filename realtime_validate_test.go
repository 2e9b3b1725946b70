package syncgo_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/syncerr"
)

// A text message that is not UTF-8 fails the connection with 1007 (RFC
// 6455 §8.1); well-formed text the server does not understand is still
// ignored, as the reference does.
func TestRealtimeNonUTF8TextCloses1007(t *testing.T) {
	e := newRTEnv(t)
	s := e.dial("alice", "a1")
	s.hello()
	if err := s.write(ws.OpText, []byte(`{"type":"no-such-message"}`)); err != nil {
		t.Fatal(err)
	}
	s.barrier() // still served after unknown, well-formed text
	if err := s.write(ws.OpText, []byte("{\"type\":\"ack\",\"cursor\":1,\"x\":\"\xff\"}")); err != nil {
		t.Fatal(err)
	}
	s.wantClose(ws.StatusInvalidFramePayloadData)
	if st := e.srv.RealtimeStats(); st.ClosedProtocol != 1 {
		t.Fatalf("stats %+v: want one protocol close", st)
	}
}

// A clientId the server cannot store (NUL, not UTF-8, overlong) is
// refused before the upgrade with sync.invalid_client_id.
func TestRealtimeUnusableClientIDRefused(t *testing.T) {
	e := newRTEnv(t)
	for _, id := range []string{"a%00b", "a%FFb", strings.Repeat("x", 513)} {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/realtime?clientId="+id, nil)
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		pe, perr := syncerr.ParseJSON(b[:n])
		if resp.StatusCode != http.StatusBadRequest || perr != nil || pe.Code != syncerr.CodeInvalidClientID {
			t.Fatalf("clientId %.20q: HTTP %d %s; want 400 %s before any upgrade", id, resp.StatusCode, b[:n], syncerr.CodeInvalidClientID)
		}
	}
	s := e.dial("alice", "ok-client")
	s.hello()
}
