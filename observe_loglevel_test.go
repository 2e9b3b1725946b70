package syncgo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// logRecord is one server log line as JSON.
type logRecord struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	// Err is the record's err attribute as logged: a string, or an
	// object when the handler marshalled the error as JSON.
	Err json.RawMessage `json:"err"`
}

// logRecords parses a JSON log.
func logRecords(t *testing.T, log string) []logRecord {
	t.Helper()
	var out []logRecord
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var r logRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// stallStore makes row scans wait, on demand, until their request's
// context ends, as a slow query does when its client goes away.
type stallStore struct {
	store.Store
	stall   atomic.Bool
	entered chan struct{}
}

func (s *stallStore) ScanRows(ctx context.Context, partition string, q store.RowScanQuery) ([]store.Row, error) {
	if s.stall.Load() {
		s.entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.ScanRows(ctx, partition, q)
}

// A client that goes away while its request is being served (its context
// ends, as when a mobile client loses its connection) is no server fault:
// nothing is logged at ERROR and the host's error hook is not called,
// whether the request was still before its response (here in the scope
// resolver, which reads with the request's context) or in it (a
// bootstrap's row scan). A warning says it.
func TestClientGoneIsNotAnError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server, access lockedBuffer
		entered := make(chan struct{}, 1)
		onError := make(chan string, 8)
		var e *e2eEnv
		var ss *stallStore
		e = newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.AccessLog = slog.New(slog.NewJSONHandler(&access, nil))
			c.OnError = func(err error, route string) { onError <- route + ": " + err.Error() }
			ss = &stallStore{Store: c.Store, entered: entered}
			c.Store = ss
			c.ResolveScopes = func(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
				if req.ActorID != "leaver" {
					return e.resolve(ctx, req)
				}
				entered <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}
		})
		w := e.client("writer", sspclient.Options{})
		mustUpsert(t, w, taskRow("a1", "p1", "a1"))
		syncQuiet(t, w)

		for _, tc := range []struct{ name, actor string }{
			{"before the response", "leaver"},
			{"in the response", "reader"},
		} {
			ss.stall.Store(tc.actor == "reader")
			c := e.client(tc.actor, sspclient.Options{})
			mustSubscribe(t, c, "s", "p1")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.SyncUntilQuiet(ctx, 5)
				done <- err
			}()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the request never stalled", tc.name)
			}
			answered := strings.Count(access.String(), `"route":"sync"`)
			logged := len(logRecords(t, server.String()))
			cancel()
			if err := <-done; err == nil {
				t.Fatalf("%s: the cancelled round succeeded", tc.name)
			}
			ss.stall.Store(false)
			// The handler has returned once its access log line is written.
			eventually(t, "the cancelled request's access log line", func() bool {
				return strings.Count(access.String(), `"route":"sync"`) > answered
			})
			warned := false
			for _, r := range logRecords(t, server.String())[logged:] {
				if r.Level == "ERROR" {
					t.Errorf("%s: a client that went away was logged at ERROR: %s %s", tc.name, r.Msg, r.Err)
				}
				if r.Level == "WARN" && strings.Contains(r.Msg, "went away") {
					warned = true
				}
			}
			if !warned {
				t.Errorf("%s: no WARN record says the client went away:\n%s", tc.name, server.String())
			}
			select {
			case got := <-onError:
				t.Errorf("%s: a client that went away reached OnError: %s", tc.name, got)
			default:
			}
		}
	})
}

// bindFaultStore fails BindClient on demand: a storage failure before
// any response byte, answered with the §10.1 JSON body.
type bindFaultStore struct {
	store.Store
	fail atomic.Bool
}

func (b *bindFaultStore) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	if b.fail.Load() {
		return store.ClientRecord{}, errInjected
	}
	return b.Store.BindClient(ctx, partition, rec)
}

// A storage failure is a server fault: it is logged at ERROR with its
// cause, in the JSON log format too (an operator must read what failed,
// not the client's "internal server error"), whether it came before the
// response began (the JSON error body) or after (an in-band ERROR frame).
func TestServerFaultLoggedWithCause(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server lockedBuffer
		var fs *faultyStore
		var bs *bindFaultStore
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
			bs = &bindFaultStore{Store: c.Store}
			fs = &faultyStore{Store: bs}
			c.Store = fs
		})
		w := e.client("writer", sspclient.Options{})
		mustUpsert(t, w, taskRow("a1", "p1", "a1"))
		syncQuiet(t, w)

		errorRecords := func() []logRecord {
			var out []logRecord
			for _, r := range logRecords(t, server.String()) {
				if r.Level == "ERROR" {
					out = append(out, r)
				}
			}
			return out
		}
		for _, tc := range []struct {
			name   string
			inject func(on bool)
		}{
			{"before the response", func(on bool) { bs.fail.Store(on) }},
			{"in the response", func(on bool) {
				p1 := "p1"
				if on {
					fs.failScope.Store(&p1)
				} else {
					fs.failScope.Store(nil)
				}
			}},
		} {
			before := len(errorRecords())
			tc.inject(true)
			c := e.client("alice-"+strings.ReplaceAll(tc.name, " ", "-"), sspclient.Options{})
			mustSubscribe(t, c, "s", "p1")
			if _, err := c.Sync(context.Background()); err == nil {
				t.Fatalf("%s: a round whose storage failed succeeded", tc.name)
			}
			tc.inject(false)
			eventually(t, "the fault's log record", func() bool { return len(errorRecords()) > before })
			faults := errorRecords()[before:]
			if len(faults) != 1 || !strings.Contains(string(faults[0].Err), errInjected.Error()) {
				t.Errorf("%s: want one ERROR record naming the cause %q, got %d:\n%s", tc.name, errInjected, len(faults), server.String())
			}
		}
	})
}

// A remote operation whose caller goes away while it runs (a command
// reading with the request's context) is no server fault either.
func TestOperationClientGoneIsNotAnError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server, access lockedBuffer
		entered := make(chan struct{}, 1)
		onError := make(chan string, 8)
		ops := syncgo.Operations{Commands: []syncgo.Command{{ID: "slow",
			Authorize: func(context.Context, syncgo.Caller, any) (bool, error) { return true, nil },
			Run: func(ctx context.Context, _ *syncgo.CommandContext, _ any) ([]syncgo.Mutation, error) {
				entered <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}}}}
		e := newOpsEnv(t, d.open(t), ops, func(c *syncgo.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.AccessLog = slog.New(slog.NewJSONHandler(&access, nil))
			c.OnError = func(err error, route string) { onError <- route + ": " + err.Error() }
		})
		body, err := remotewire.Encode(nil, command("w1", "slow", "r1", remotewire.Object{}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/operations", bytes.NewReader(body))
		hr.Header.Set("Content-Type", remotewire.ContentType)
		hr.Header.Set("Authorization", "Bearer alice")
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(hr)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the command never ran")
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled operation was answered")
		}
		eventually(t, "the cancelled operation's access log line", func() bool {
			return strings.Contains(access.String(), `"route":"operations"`)
		})
		warned := false
		for _, r := range logRecords(t, server.String()) {
			if r.Level == "ERROR" {
				t.Errorf("a caller that went away was logged at ERROR: %s %s", r.Msg, r.Err)
			}
			if r.Level == "WARN" && strings.Contains(r.Msg, "went away") {
				warned = true
			}
		}
		if !warned {
			t.Errorf("no WARN record says the caller went away:\n%s", server.String())
		}
		select {
		case got := <-onError:
			t.Errorf("a caller that went away reached OnError: %s", got)
		default:
		}
	})
}

// smallBufferListener gives each accepted connection a small send
// buffer, so that a client that stops reading blocks the server's writes
// after a few KiB instead of after the kernel's default megabytes.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// A client that stops reading its response is cut off after the write
// timeout (Config.WriteTimeout): that is the client's doing, a warning,
// not an ERROR and not OnError.
func TestStalledReaderIsNotAnError(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server lockedBuffer
		onError := make(chan string, 8)
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.OnError = func(err error, route string) { onError <- route + ": " + err.Error() }
			c.WriteTimeout = 300 * time.Millisecond
		})
		w := e.client("writer", sspclient.Options{})
		for i := range 300 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("t%03d", i), "p1", strings.Repeat("x", 1000)))
		}
		syncQuiet(t, w)
		epoch := e.partitionState().LogEpoch

		hs := httptest.NewUnstartedServer(e.srv.Handler())
		hs.Listener = smallBufferListener{hs.Listener}
		hs.Start()
		t.Cleanup(hs.Close)
		body := encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: "slow-reader", SchemaVersion: 1, LogEpoch: &epoch},
			Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
				Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
		nc, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.(*net.TCPConn).SetReadBuffer(4 << 10)
		fmt.Fprintf(nc, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nAuthorization: Bearer alice\r\n"+
			"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n", sspclient.ContentType, len(body))
		if _, err := nc.Write(body); err != nil {
			t.Fatal(err)
		}
		// And never read.
		eventually(t, "the stalled response to be given up", func() bool {
			return strings.Contains(server.String(), "sync response")
		})
		warned := false
		for _, r := range logRecords(t, server.String()) {
			if r.Level == "ERROR" {
				t.Errorf("a client that stopped reading was logged at ERROR: %s %s", r.Msg, r.Err)
			}
			warned = warned || (r.Level == "WARN" && strings.Contains(r.Msg, "stopped reading"))
		}
		if !warned {
			t.Errorf("no WARN record says the client stopped reading:\n%s", server.String())
		}
		select {
		case got := <-onError:
			t.Errorf("a client that stopped reading reached OnError: %s", got)
		default:
		}
	})
}
