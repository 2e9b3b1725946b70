package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// gateTrap is a store whose serve-gate reads can run a function (another
// process's schema bump) right after a chosen read, once armed.
type gateTrap struct {
	store.Store
	store.Barrier
	armed atomic.Bool
	reads atomic.Int32
	at    int32
	fire  func()
	fired atomic.Bool
}

func (g *gateTrap) ReadServeGate(ctx context.Context, partition string, running int32) (store.ServeGate, error) {
	gate, err := g.Barrier.ReadServeGate(ctx, partition, running)
	if g.armed.Load() && g.reads.Add(1) == g.at {
		g.fire()
		g.fired.Store(true)
	}
	return gate, err
}

// The serve gate's read-verify runs on both real transports: when another
// process bumps the schema between the entry gate and the response, the
// client gets sync.schema_not_ready (HTTP 503 before the first byte, an
// ERROR frame once the response streams, an ERROR round on a socket),
// never rows of the other layout and never sync.internal_error.
func TestServeGateReadVerify(t *testing.T) {
	v1, v2 := windowSchemas(t)
	for _, d := range barrierDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name   string
				socket bool
				at     int32 // the gate read after which the bump lands
			}{
				{"http/before-first-byte", false, 1},
				{"http/while-streaming", false, 2},
				{"socket/before-first-chunk", true, 1},
				{"socket/while-streaming", true, 2},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := &barrierEnv{t: t, driver: d, db: d.database(t)}
					testReadVerify(t, e, v1, v2, tc.socket, tc.at)
				})
			}
		})
	}
}

// ReadRequestState counts as a serve-gate read too: the stores read the
// gate with the partition (at entry, and at the recheck after a window).
func (g *gateTrap) ReadRequestState(ctx context.Context, partition, clientID string, running int32) (store.RequestState, error) {
	st, err := g.Store.(store.RequestStateReader).ReadRequestState(ctx, partition, clientID, running)
	if g.armed.Load() && g.reads.Add(1) == g.at {
		g.fire()
		g.fired.Store(true)
	}
	return st, err
}

// ReadCommitWindow counts the serve gate a window reads after its rows
// (CommitWindowQuery.StateAfter) as a gate read.
func (g *gateTrap) ReadCommitWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	win, err := g.Store.ReadCommitWindow(ctx, partition, q)
	if win.State != nil && g.armed.Load() && g.reads.Add(1) == g.at {
		g.fire()
		g.fired.Store(true)
	}
	return win, err
}

func testReadVerify(t *testing.T, e *barrierEnv, v1, v2 *schema.Compiled, socket bool, at int32) {
	trap, url := readVerifyServer(t, e, v1, v2, at)
	testReadVerifyOn(t, trap, url, v1, socket, at)
}

// readVerifyServer serves v1 on e's store behind a gate trap that bumps
// the schema to v2 from another store after the at-th gate read.
func readVerifyServer(t *testing.T, e *barrierEnv, v1, v2 *schema.Compiled, at int32) (*gateTrap, string) {
	ctx := context.Background()
	st := e.open()
	trap := &gateTrap{Store: st, Barrier: st.(store.Barrier), at: at}
	trap.fire = func() {
		if err := e.open().EnsureSchema(ctx, v2); err != nil {
			t.Errorf("the other process's bump: %v", err)
		}
	}
	srv, err := syncgo.New(syncgo.Config{
		Store: trap, Schema: v1, RetentionInterval: -1, OnError: func(err error, route string) { t.Logf("OnError %s: %v", route, err) },
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			return syncgo.Auth{ActorID: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), Partition: "p"}, nil
		},
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return trap, hs.URL
}

func testReadVerifyOn(t *testing.T, trap *gateTrap, url string, v1 *schema.Compiled, socket bool, at int32) {
	ctx := context.Background()
	// Enough rows for a response of several chunks.
	w, err := sspclient.New(url, "writer", v1, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	title := strings.Repeat("t", 400)
	for i := range 600 {
		if _, err := w.Upsert("tasks", map[string]any{"id": fmt.Sprintf("r%04d", i), "project_id": "p1", "title": title}); err != nil {
			t.Fatal(err)
		}
	}
	syncQuiet(t, w)
	epoch := acquirePullEpoch(t, url)
	// Pages of 100 rows (about 40 KB): each page is a chunk of its own.
	req := pullReq(&epoch, 1)
	req.Pull.LimitSnapshotRows, req.Pull.MaxSnapshotPages = 100, 10

	trap.armed.Store(true)
	var frames []wire.Frame
	if socket {
		d := rtDialer("alice")
		s, err := rtDial(ctx, d, "ws"+strings.TrimPrefix(url, "http")+"/realtime?clientId=c", 256)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.nc.Close() })
		s.t, s.clientID = t, "c"
		s.startReading()
		b, err := req.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		s.sendRound(b)
		msg, _, _ := s.roundResponse()
		frames = msg.Frames
	} else {
		status, body := post(t, url, req)
		if at == 1 {
			wantNotReady(t, status, body, "storedSchemaVersion")
			if !trap.fired.Load() {
				t.Fatal("the bump never ran")
			}
			return
		}
		if status != http.StatusOK {
			t.Fatalf("status %d (%s), want 200: the first chunk passed the gate", status, body)
		}
		msg, err := wire.DecodeMessage(body, wire.DecoderOptions{Kind: wire.KindResponse})
		if err != nil {
			t.Fatalf("decode the response: %v", err)
		}
		frames = msg.Frames
	}
	if !trap.fired.Load() {
		t.Fatal("the bump never ran: the response was never verified after the entry gate")
	}
	var ef *wire.ErrorFrame
	rows := 0
	for _, f := range frames {
		switch f := f.(type) {
		case *wire.ErrorFrame:
			ef = f
		case *wire.SegmentInline:
			seg, err := wire.DecodeSegment(f.Payload)
			if err != nil {
				t.Fatalf("a segment sent before the refusal does not decode: %v", err)
			}
			if seg.Header.SchemaVersion != 1 || len(seg.Header.Columns) != 3 {
				t.Fatalf("a segment of version %d with %d columns was served by the version-1 process",
					seg.Header.SchemaVersion, len(seg.Header.Columns))
			}
			for _, b := range seg.Blocks {
				rows += len(b)
			}
		}
	}
	if ef == nil || ef.Code != syncerr.CodeSchemaNotReady {
		t.Fatalf("frames %v: want an ERROR frame sync.schema_not_ready", frames)
	}
	if at == 1 && rows != 0 {
		t.Fatalf("%d rows served although the gate changed before the first chunk", rows)
	}
	if rows >= 600 {
		t.Fatalf("all %d rows served although the gate changed while streaming", rows)
	}
}

// An incremental pull (a commit window) is verified too: the serve gate
// read after the window's rows (with them, or by the horizon recheck)
// stands for a read at release, so a bump that lands after the entry gate
// and before that read is refused before the first byte.
func TestServeGateReadVerifyWindow(t *testing.T) {
	v1, v2 := windowSchemas(t)
	for _, d := range barrierDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := &barrierEnv{t: t, driver: d, db: d.database(t)}
			trap, url := readVerifyServer(t, e, v1, v2, 1)
			w, err := sspclient.New(url, "writer", v1, sspclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			upsert := func(from int) {
				for i := from; i < from+5; i++ {
					if _, err := w.Upsert("tasks", map[string]any{"id": fmt.Sprintf("r%04d", i), "project_id": "p1", "title": "t"}); err != nil {
						t.Fatal(err)
					}
				}
				syncQuiet(t, w)
			}
			upsert(0)
			epoch := acquirePullEpoch(t, url)
			req := pullReq(&epoch, 1)
			status, body := post(t, url, req)
			m, err := wire.DecodeMessage(body, wire.DecoderOptions{Kind: wire.KindResponse})
			if status != 200 || err != nil {
				t.Fatalf("bootstrap: %d %v", status, err)
			}
			cursor := int64(-1)
			for _, f := range m.Frames {
				if end, ok := f.(*wire.SubEnd); ok {
					cursor = end.NextCursor
				}
			}
			if cursor <= 0 {
				t.Fatalf("bootstrap left cursor %d", cursor)
			}
			upsert(5)
			req.Subscriptions[0].Cursor = cursor
			trap.armed.Store(true)
			status, body = post(t, url, req)
			if !trap.fired.Load() {
				t.Fatal("the bump never ran")
			}
			wantNotReady(t, status, body, "storedSchemaVersion")
			if n := trap.reads.Load(); n < 2 {
				t.Fatalf("%d gate reads after the entry's; want the recheck's (or the release's) after the window", n-1)
			}
		})
	}
}

// acquirePullEpoch runs pullReq's epoch acquisition and returns the epoch.
func acquirePullEpoch(t *testing.T, url string) string {
	t.Helper()
	status, body := post(t, url, pullReq(nil, 1))
	m, err := wire.DecodeMessage(body, wire.DecoderOptions{})
	if status != 200 || err != nil {
		t.Fatalf("acquire epoch: %d %v", status, err)
	}
	return m.Frames[0].(*wire.RespHeader).LogEpoch
}
