package syncgo_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/syncerr"
)

// refusedUpgrade dials a socket that the server must refuse before the
// upgrade, and returns the refusal's HTTP status and error code.
func refusedUpgrade(t *testing.T, e *rtEnv, token, clientID string) (int, string) {
	t.Helper()
	d := rtDialer(token)
	status, code := 0, ""
	d.OnStatusError = func(st int, _ []byte, resp io.Reader) {
		status = st
		r, err := http.ReadResponse(bufio.NewReader(resp), nil)
		if err != nil {
			return
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if pe, err := syncerr.ParseJSON(b); err == nil {
			code = pe.Code
		}
	}
	if s, err := rtDial(context.Background(), d, e.wsURL(clientID), 1); err == nil {
		_ = s.nc.Close()
		t.Fatalf("%s/%s: the upgrade was accepted, want a refusal", token, clientID)
	}
	return status, code
}

// The realtime socket caps refuse an actor's socket beyond its cap, and
// any socket beyond the total, with sync.websocket_connection_limit (429)
// before the upgrade; another actor under its cap is accepted; closing
// sockets frees their places (no leak): new ones are accepted again.
func TestSocketCaps(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.Realtime.MaxSocketsPerActor, c.Realtime.MaxSockets = 2, 3
	})
	a1, a2 := e.dial("alice", "a1"), e.dial("alice", "a2")
	a1.hello()
	a2.hello()
	if st, code := refusedUpgrade(t, e, "alice", "a3"); st != http.StatusTooManyRequests || code != syncerr.CodeWebsocketConnectionLimit {
		t.Fatalf("alice's third socket: HTTP %d %q, want 429 %s", st, code, syncerr.CodeWebsocketConnectionLimit)
	}
	b1 := e.dial("bob", "b1")
	b1.hello()
	if st, code := refusedUpgrade(t, e, "carol", "c1"); st != http.StatusTooManyRequests || code != syncerr.CodeWebsocketConnectionLimit {
		t.Fatalf("a socket beyond the total: HTTP %d %q, want 429 %s", st, code, syncerr.CodeWebsocketConnectionLimit)
	}

	// Close every socket, several times over: each time all the places
	// come back.
	socks := []*rtSock{a1, a2, b1}
	for round := range 3 {
		for _, s := range socks {
			_ = s.nc.Close()
		}
		socks = socks[:0]
		for _, who := range [][2]string{{"alice", "a1"}, {"alice", "a2"}, {"carol", "c1"}} {
			deadline := time.Now().Add(rtWait)
			for {
				s, err := rtDial(context.Background(), rtDialer(who[0]), e.wsURL(who[1]), 256)
				if err == nil {
					s.t, s.clientID = t, who[1]
					s.startReading()
					s.hello()
					socks = append(socks, s)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: %s/%s still refused after the sockets closed: %v", round, who[0], who[1], err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if st, _ := refusedUpgrade(t, e, "dave", "d1"); st != http.StatusTooManyRequests {
			t.Fatalf("round %d: the total cap no longer holds: HTTP %d", round, st)
		}
	}
	for _, s := range socks {
		_ = s.nc.Close()
	}
}

// Watch sockets (/operations/realtime) count under the same caps as
// /realtime sockets, and free their place when they close.
func TestSocketCapsWatch(t *testing.T) {
	e := newOpsEnv(t, openSQLite(t), syncgo.Operations{}, func(c *syncgo.Config) {
		c.Realtime.MaxSocketsPerActor = 1
	})
	base := "ws" + strings.TrimPrefix(e.url, "http")
	refused := func(path string) (int, string) {
		t.Helper()
		status, code := 0, ""
		d := rtDialer("alice")
		d.OnStatusError = func(st int, _ []byte, resp io.Reader) {
			status = st
			if r, err := http.ReadResponse(bufio.NewReader(resp), nil); err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				if pe, err := syncerr.ParseJSON(b); err == nil {
					code = pe.Code
				}
			}
		}
		if c, _, _, err := d.Dial(context.Background(), base+path); err == nil {
			c.Close()
			t.Fatalf("%s: accepted over the cap", path)
		}
		return status, code
	}
	w := dialWatch(t, e, "alice")
	for _, path := range []string{"/operations/realtime", "/realtime?clientId=a1"} {
		if st, code := refused(path); st != http.StatusTooManyRequests || code != syncerr.CodeWebsocketConnectionLimit {
			t.Fatalf("%s beside an open watch socket: HTTP %d %q, want 429 %s", path, st, code, syncerr.CodeWebsocketConnectionLimit)
		}
	}
	_ = w.conn.Close()
	eventually(t, "a watch socket accepted after the first closed", func() bool {
		c, _, _, err := rtDialer("alice").Dial(context.Background(), base+"/operations/realtime")
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}
