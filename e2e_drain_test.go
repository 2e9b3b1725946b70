package syncgo_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// TestE2EDrainClosesConnections: once the server drains (Drain, the
// binary's shutdown_delay), each HTTP answer closes its connection, so
// that a client's next request goes out on a new connection instead of
// racing the stop's close of idle keep-alive connections (a request sent
// as its connection closes fails with a reset or an EOF, which the soak
// tool saw at a rolling deploy). Socket upgrades still succeed and serve.
func TestE2EDrainClosesConnections(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		// post sends a request the server refuses (an empty body) and
		// reports whether the answer closes the connection and whether
		// the request went out on a reused one.
		post := func() (closes, reused bool) {
			t.Helper()
			req, err := http.NewRequest("POST", e.url+"/sync", bytes.NewReader(nil))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Content-Type", "application/vnd.syncular.ssp2")
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
			}))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Fatalf("an empty body answered %d", resp.StatusCode)
			}
			return resp.Close, reused
		}
		post()
		if closes, reused := post(); closes || !reused {
			t.Fatalf("before the drain: the answer closes its connection %v, the request reused one %v; want false, true", closes, reused)
		}

		// A socket open before the drain, and one opened during it.
		writer := e.client("alice", sspclient.Options{})
		mustSubscribe(t, writer, "tasks:p1", "p1")
		syncQuiet(t, writer)
		e.srv.Drain()
		if closes, _ := post(); !closes {
			t.Fatal("while draining, an answer kept its connection open (no Connection: close)")
		}
		if _, reused := post(); reused {
			t.Fatal("while draining, the next request went out on the connection the last answer closed")
		}
		reader := e.client("bob", sspclient.Options{})
		mustSubscribe(t, reader, "tasks:p1", "p1")
		syncQuiet(t, reader)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt, err := reader.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatalf("a socket upgrade while draining: %v", err)
		}
		defer rt.Drop()
		mustUpsert(t, writer, taskRow("t1", "p1", "during the drain"))
		syncQuiet(t, writer)
		for {
			m, err := rt.Next()
			if err != nil {
				t.Fatalf("the socket opened while draining: %v", err)
			}
			if m.Delta != nil {
				break
			}
		}
	})
}
