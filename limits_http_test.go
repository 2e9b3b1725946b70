package syncgo_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// rawPost sends the headers of a POST /sync declaring len(body) bytes,
// then the body in pieces with a pause before each, and returns the
// connection (the response is read by the caller).
func rawPost(t *testing.T, url, actor string, body []byte, pieces int, pause time.Duration) (net.Conn, *bufio.Reader) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	fmt.Fprintf(nc, "POST /sync HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n",
		host, syncgo.ProtocolContentType, actor, len(body))
	step := (len(body) + pieces - 1) / pieces
	for len(body) > 0 && pieces > 0 {
		time.Sleep(pause)
		n := min(step, len(body))
		if _, err := nc.Write(body[:n]); err != nil {
			t.Fatal(err)
		}
		body = body[n:]
		pieces--
	}
	return nc, bufio.NewReader(nc)
}

// rawPostDeclared sends the headers declaring n bytes and only body.
func rawPostDeclared(t *testing.T, url, actor string, body []byte, n int) (net.Conn, *bufio.Reader) {
	return rawPostTo(t, url, "/sync", syncgo.ProtocolContentType, actor, body, n)
}

// rawPostTo is rawPostDeclared to another route.
func rawPostTo(t *testing.T, url, path, contentType, actor string, body []byte, n int) (net.Conn, *bufio.Reader) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	fmt.Fprintf(nc, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		path, host, contentType, actor, n, body)
	return nc, bufio.NewReader(nc)
}

// The JSON routes (/commits, /operations) cut off a stalled body too.
func TestHTTPBodyStallTimeoutJSONRoutes(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	for _, route := range []struct{ path, contentType string }{
		{"/commits", syncgo.JSONCommitsContentType},
		{"/operations", syncgo.OperationsContentType},
	} {
		body := []byte(`{"clientId":"slow","commits":[{"clientCommitId":"c","operations":[]}]}`)
		nc, br := rawPostTo(t, e.url, route.path, route.contentType, "alice", body[:10], len(body))
		_ = nc.SetReadDeadline(time.Now().Add(rtWait))
		start := time.Now()
		resp, err := http.ReadResponse(br, nil)
		switch {
		case err == nil:
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode == http.StatusOK && route.path == "/commits" {
				t.Fatalf("%s: a stalled body answered 200", route.path)
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("%s: a stalled body held for %v: the server never cut it off", route.path, time.Since(start))
		}
		if d := time.Since(start); d > rtWait/2 {
			t.Fatalf("%s: a stalled body held for %v", route.path, d)
		}
	}
}

// A request body that keeps arriving, slowly, is served however long it
// takes in total; one that stalls is cut off after the stall timeout
// (issue 15, finding 6).
func TestHTTPBodyStallTimeout(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	p := e.peer("alice", "slow")
	p.acquireEpoch()
	body := p.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: []*wire.Subscription{rtSub("s", -1, "p1")}})

	// 8 pieces, 150 ms apart: 1.2 s in all, four stall timeouts.
	nc, br := rawPost(t, e.url, "alice", body, 8, 150*time.Millisecond)
	_ = nc.SetReadDeadline(time.Now().Add(rtWait))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("slow body: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("slow body: status %d", resp.StatusCode)
	}

	// Half the body, then nothing: the declared length is the whole body.
	nc, br = rawPostDeclared(t, e.url, "alice", body[:len(body)/2], len(body))
	_ = nc.SetReadDeadline(time.Now().Add(rtWait))
	start := time.Now()
	resp2, err := http.ReadResponse(br, nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp2.Body)
		if resp2.StatusCode == http.StatusOK {
			t.Fatalf("stalled body answered 200")
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("stalled body held for %v: the server never cut it off", time.Since(start))
	}
}

// The connection cap: idle connections at the cap hold back new ones
// (queued, not refused, and no descriptor taken) until one of them goes
// (issue 15, finding 6).
func TestLimitListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute}
	go func() { _ = hs.Serve(syncgo.LimitListener(ln, 3)) }()
	defer hs.Close()
	addr := ln.Addr().String()
	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	got := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a fourth connection was served past the cap of 3 (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = idle[0].Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(rtWait):
		t.Fatal("the queued connection was not served after a slot freed")
	}
}

// An upload grant's stalled body is cut off too.
func TestHTTPBodyStallTimeoutUploadGrant(t *testing.T) {
	e := newBlobEnv(t, blobKinds[0], func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	body := []byte(`{"byteLength": 12}`)
	nc, br := rawPostTo(t, e.url, "/blobs/"+blobOf([]byte("stalled"))+"/upload-grant", "application/json", "alice", body[:5], len(body))
	_ = nc.SetReadDeadline(time.Now().Add(rtWait))
	start := time.Now()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled grant request after %v: %v", time.Since(start), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || time.Since(start) > rtWait/2 {
		t.Fatalf("a stalled grant request: %d after %v", resp.StatusCode, time.Since(start))
	}
}
