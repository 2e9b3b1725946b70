package syncgo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// TestE2EBodyMemory: request bodies are read before a request is
// admitted, so the bytes they hold at once are bounded (MaxBodyMemory).
// While one large push is being read, another large body that would take
// the total over the bound is refused at once with sync.rate_limited (503,
// Retry-After) and writes nothing, on /sync and on /commits; a small
// round is still served (each body's first 64 KiB are not counted); once
// the first body is done the refused push goes through.
func TestE2EBodyMemory(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.MaxRequestBytes, c.MaxBodyMemory = 1<<20, 1<<20 })
		seed := e.client("alice", sspclient.Options{})
		mustUpsert(t, seed, taskRow("t0", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		// pushBody is a push of one row followed by pad bytes in a
		// reserved frame (one a decoder skips, §1.2), without its END.
		pushBody := func(clientID, rowID string, pad int) []byte {
			b := encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: "c-" + rowID,
					Operations: []wire.Operation{e.upsertOp(t, taskRow(rowID, "p1", "big"))}}}})
			b = b[:len(b)-5]
			b = append(binary.LittleEndian.AppendUint32(append(b, 0x20), uint32(pad)), make([]byte, pad)...)
			return b
		}
		end := frame(wire.FrameEnd, nil)

		// The held push: 700 KiB sent, its END held back.
		pr, pw := io.Pipe()
		held := make(chan rawResponse, 1)
		go func() { held <- e.post(t, pr, nil) }()
		if _, err := pw.Write(pushBody("held-client", "h1", 700<<10)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); e.srv.BodyMemoryInUseForTest() < 600<<10; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the held body was not counted: %d bytes", e.srv.BodyMemoryInUseForTest())
			}
		}

		// A second push of 500 KiB does not fit beside it.
		second := append(pushBody("second-client", "s1", 500<<10), end...)
		before := e.snapshot(t, "second-client", "c-s1")
		r := e.post(t, bytes.NewReader(second), nil)
		wantJSONError(t, r, http.StatusServiceUnavailable, syncerr.CodeRateLimited)
		if r.header.Get("Retry-After") == "" {
			t.Fatal("the refusal has no Retry-After")
		}
		if after := e.snapshot(t, "second-client", "c-s1"); !after.equal(before) {
			t.Fatalf("the refused push changed the database:\nbefore %+v\nafter  %+v", before, after)
		}
		// So does a large /commits body.
		rows := make([]string, 0, 400)
		for i := range 400 {
			rows = append(rows, `{"op":"upsert","table":"tasks","rowId":"`+fmt.Sprintf("j%d", i)+`","values":{"title":"`+strings.Repeat("y", 1200)+`"}}`)
		}
		jr, err := http.NewRequest(http.MethodPost, e.url+"/commits",
			strings.NewReader(`{"clientId":"json-client","commits":[{"clientCommitId":"j1","operations":[`+strings.Join(rows, ",")+`]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		jr.Header.Set("Content-Type", syncgo.JSONCommitsContentType)
		jr.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(jr)
		if err != nil {
			t.Fatal(err)
		}
		jb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(jb), syncerr.CodeRateLimited) {
			t.Fatalf("a large /commits body beside the held one: HTTP %d %s", resp.StatusCode, jb)
		}
		// A small round is served.
		c := e.client("alice", sspclient.Options{})
		mustUpsert(t, c, taskRow("small", "p1", "small"))
		syncQuiet(t, c)
		// A socket round of 500 KiB does not fit either: the socket is
		// closed with 1013 (try again later), in chunks or whole.
		for _, chunks := range [][]int{nil, {200 << 10, 200 << 10}} {
			sock, err := rtDial(context.Background(), rtDialer("alice"),
				"ws"+strings.TrimPrefix(e.url, "http")+"/realtime?clientId=socket-client", 16)
			if err != nil {
				t.Fatal(err)
			}
			sock.t, sock.clientID = t, "socket-client"
			sock.sendRound(append(pushBody("socket-client", "w1", 500<<10), end...), chunks...)
			// Read frames raw: gobwas/ws refuses close code 1013 as
			// unknown, though RFC 6455's registry holds it.
			_ = sock.nc.SetReadDeadline(time.Now().Add(rtWait))
			for {
				f, err := ws.ReadFrame(sock.r)
				if err != nil {
					t.Fatalf("the socket round beside the held body: %v before a close frame", err)
				}
				if f.Header.OpCode == ws.OpClose {
					if len(f.Payload) < 2 || binary.BigEndian.Uint16(f.Payload) != 1013 {
						t.Fatalf("close frame %q, want code 1013", f.Payload)
					}
					break
				}
			}
			_ = sock.nc.Close()
		}
		if _, ok := e.serverRows("tasks")["w1"]; ok {
			t.Fatal("the refused socket round wrote its row")
		}

		// The held push ends; its bytes are given back, and the refused
		// push goes through.
		if _, err := pw.Write(end); err != nil {
			t.Fatal(err)
		}
		_ = pw.Close()
		if h := <-held; h.status != http.StatusOK {
			t.Fatalf("the held push: HTTP %d %s", h.status, h.body)
		}
		for deadline := time.Now().Add(10 * time.Second); e.srv.BodyMemoryInUseForTest() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d body bytes still counted after the requests ended", e.srv.BodyMemoryInUseForTest())
			}
		}
		if r := e.post(t, bytes.NewReader(second), nil); r.status != http.StatusOK {
			t.Fatalf("the refused push, retried: HTTP %d %s", r.status, r.body)
		}
		// So does a socket round.
		sock, err := rtDial(context.Background(), rtDialer("alice"),
			"ws"+strings.TrimPrefix(e.url, "http")+"/realtime?clientId=socket-client", 16)
		if err != nil {
			t.Fatal(err)
		}
		sock.t, sock.clientID = t, "socket-client"
		sock.startReading()
		sock.hello()
		sock.sendRound(append(pushBody("socket-client", "w1", 500<<10), end...))
		if m, _, _ := sock.roundResponse(); rtPushed(t, m) == 0 {
			t.Fatal("the socket round, retried, was not applied")
		}
		_ = sock.nc.Close()
		for deadline := time.Now().Add(10 * time.Second); e.srv.BodyMemoryInUseForTest() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d body bytes still counted after the socket round", e.srv.BodyMemoryInUseForTest())
			}
		}
		rowsNow := e.serverRows("tasks")
		for _, id := range []string{"h1", "s1", "small", "w1"} {
			if _, ok := rowsNow[id]; !ok {
				t.Errorf("row %s is missing from %v", id, rowsNow)
			}
		}
	})
}
