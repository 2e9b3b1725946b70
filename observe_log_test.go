package syncgo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// secretAuth reads "Authorization: Bearer actor:secret": the actor is
// logged, the secret must never be.
func secretAuth(r *http.Request) (syncgo.Auth, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	actor, secret, found := strings.Cut(tok, ":")
	if !ok || !found || secret != "SECRET-TOKEN-123" {
		return syncgo.Auth{}, errors.New("bad token")
	}
	return syncgo.Auth{ActorID: actor, Partition: e2ePartition}, nil
}

// accessLine is one access log line as JSON.
type accessLine struct {
	Msg      string  `json:"msg"`
	Method   string  `json:"method"`
	Route    string  `json:"route"`
	Path     string  `json:"path"`
	Status   int     `json:"status"`
	Duration float64 `json:"duration"`
	Actor    string  `json:"actor"`
	BytesIn  int64   `json:"bytes_in"`
	BytesOut int64   `json:"bytes_out"`
	Op       string  `json:"op"`
	Code     string  `json:"code"`
}

// Every request answered gets one access log line with its route,
// status, duration, actor and byte counts; no line, of the access log or
// of the server log, carries the Authorization value, a token in a query
// string, or a row value.
func TestAccessLogCarriesNoSecrets(t *testing.T) {
	var access, server lockedBuffer
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) {
		c.Authenticate = secretAuth
		c.AccessLog = slog.New(slog.NewJSONHandler(&access, nil))
		c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	c := e.client("alice:SECRET-TOKEN-123", sspclient.Options{})
	mustSubscribe(t, c, "s", "p1")
	mustUpsert(t, c, taskRow("t1", "p1", "PRIVATE-ROW-VALUE"))
	syncQuiet(t, c)
	rt, err := c.DialRealtime(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
	// A token in the query string (as a browser socket may send one) and
	// a refused token.
	req, _ := http.NewRequest(http.MethodGet, e.url+"/realtime?clientId=c9&access_token=SECRET-QUERY-456", nil)
	req.Header.Set("Authorization", "Bearer mallory:SECRET-WRONG-789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The upgrade's line is written when its handler returns, which may
	// be after the client read the hello.
	eventually(t, "the upgrade's access log line", func() bool { return strings.Contains(access.String(), `"status":101`) })

	var lines []accessLine
	sc := bufio.NewScanner(strings.NewReader(access.String()))
	for sc.Scan() {
		var l accessLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("access log line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	var syncOK, upgraded, refused bool
	for _, l := range lines {
		switch {
		case l.Route == "sync" && l.Status == 200:
			syncOK = true
			if l.Actor != "alice" || l.BytesIn <= 0 || l.BytesOut <= 0 || l.Duration <= 0 || l.Method != "POST" || l.Op == "" {
				t.Errorf("sync line %+v: want actor alice, bytes both ways, a duration, the method and the operation", l)
			}
		case l.Route == "realtime" && l.Status == 101:
			upgraded = true
			if l.Actor != "alice" {
				t.Errorf("upgrade line %+v: want actor alice", l)
			}
		case l.Route == "realtime" && l.Status == 401:
			refused = true
			if l.Actor != "" || l.Code != syncerr.CodeAuthRequired || l.Path != "/realtime" {
				t.Errorf("refused line %+v: want no actor, code %s, the path without its query", l, syncerr.CodeAuthRequired)
			}
		}
	}
	if !syncOK || !upgraded || !refused {
		t.Fatalf("access log lacks a line (sync 200 %v, upgrade 101 %v, refusal 401 %v):\n%s", syncOK, upgraded, refused, access.String())
	}
	for name, log := range map[string]string{"access log": access.String(), "server log": server.String()} {
		for _, secret := range []string{"SECRET", "PRIVATE-ROW-VALUE", "Bearer", "access_token"} {
			if strings.Contains(log, secret) {
				t.Errorf("the %s carries %q:\n%s", name, secret, log)
			}
		}
	}
}

// A WebSocket upgrade that the upgrader refuses is logged with the status
// the client got: 400 for a handshake without its headers, 426 for another
// WebSocket version (not 400 for every refusal).
func TestAccessLogRefusedUpgradeStatus(t *testing.T) {
	var access lockedBuffer
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) {
		c.Authenticate = secretAuth
		c.AccessLog = slog.New(slog.NewJSONHandler(&access, nil))
	})
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{
		{"no upgrade headers", nil},
		{"WebSocket version 8", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
			"Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}},
	} {
		before := len(access.String())
		req, _ := http.NewRequest(http.MethodGet, e.url+"/realtime?clientId=c1", nil)
		req.Header.Set("Authorization", "Bearer alice:SECRET-TOKEN-123")
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("%s: answered %d, want a refusal", c.name, resp.StatusCode)
		}
		var line accessLine
		eventually(t, c.name+": the access log line", func() bool {
			return json.Unmarshal([]byte(strings.TrimSpace(access.String()[before:])), &line) == nil
		})
		if line.Route != "realtime" || line.Status != resp.StatusCode {
			t.Errorf("%s: the client got %d, the access log says route %q status %d", c.name, resp.StatusCode, line.Route, line.Status)
		}
	}
}
