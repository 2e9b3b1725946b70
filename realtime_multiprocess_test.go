package syncgo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// TestRealtimeAcrossProcesses runs two `syncgo serve` processes on one
// Postgres schema: a commit pushed to the first reaches a realtime socket
// of the second (LISTEN/NOTIFY), also after the second's listen connection
// was terminated (a delta, or a catch-up wake when the commit fell into the
// gap).
func TestRealtimeAcrossProcesses(t *testing.T) {
	base := pgtest.URL(t)
	if testing.Short() {
		t.Skip("builds and runs the syncgo binary")
	}
	t.Parallel()
	sc := mpDemoSchema(t)
	bin := binarytest.Build(t)
	db := pgtest.Schema(t, "syncgo_mp", false)
	first := mpServe(t, bin, db, "first")
	second := mpServe(t, bin, db, "second")

	// c2 registers a subscription to project p1 on the second process,
	// then opens its socket there.
	epoch, sock := mpSubscribedSocket(t, second.URL, "c2")

	// A task pushed to the first process reaches the second's socket.
	seq := mpPushTask(t, sc, first.URL, epoch, "c1", "task-1", "one")
	sock.wantTask(t, seq, "task-1", "one", false)

	// Terminate the second process's listen connection: it reconnects,
	// and a commit pushed meanwhile still reaches the socket.
	if n := mpTerminateListener(t, base, second.Cmd.Process.Pid); n < 1 {
		t.Fatalf("no listen connection of process %d in pg_stat_activity", second.Cmd.Process.Pid)
	}
	seq = mpPushTask(t, sc, first.URL, epoch, "c1", "task-2", "two")
	sock.wantTask(t, seq, "task-2", "two", true)
}

// mpSubscribedSocket acquires the log epoch as clientID on base (§2.1),
// registers a subscription to project p1's tasks, and opens the client's
// socket there; it returns the epoch and the socket, past its hello.
func mpSubscribedSocket(t *testing.T, base, clientID string) (string, *mpSocket) {
	t.Helper()
	epoch := mpAcquireEpoch(t, base, clientID)
	resp := mpSync(t, base, &wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}})
	if st := mpFrame[*wire.SubStart](t, resp); st.Status != wire.SubActive {
		t.Fatalf("subscription status = %v", st.Status)
	}
	sock := mpDial(t, base, clientID)
	if hello := sock.hello(t); hello.RequiresSync {
		t.Fatalf("hello = %+v: the registration did not load", hello)
	}
	return epoch, sock
}

// mpDemoSchema compiles the serve command's demo schema.
func mpDemoSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "cli", "demo_schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := schema.ParseJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := schema.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mpTerminateListener terminates the listen connection of the syncgo
// process pid (pgstore names it syncgo-listen-<pid>) and returns how many
// backends it terminated.
func mpTerminateListener(t *testing.T, base string, pid int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM (
  SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) x`,
		fmt.Sprintf("syncgo-listen-%d", pid)).Scan(&n)
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	return n
}

// mpServe starts `syncgo serve` on a free port, stopped at cleanup, and
// returns once it answers HTTP.
func mpServe(t *testing.T, bin, db, name string) *binarytest.Process {
	t.Helper()
	p := binarytest.Serve(t, bin, binarytest.Options{Name: name}, "-db", db, "-listen", "127.0.0.1:0")
	resp, err := http.Get(p.URL + "/")
	if err != nil {
		t.Fatalf("%s does not answer HTTP: %v", name, err)
	}
	resp.Body.Close()
	return p
}

// mpSync posts a request to /sync and decodes the response.
func mpSync(t *testing.T, base string, req *wire.Request) *wire.Message {
	t.Helper()
	b, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, base+"/sync", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hr.Header.Set("Accept-Encoding", "identity")
	hr.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("POST /sync: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /sync: %s: %s", resp.Status, body)
	}
	m, err := wire.DecodeMessage(body, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatalf("decode response: %v", err)
	}
	for _, f := range m.Frames {
		if e, ok := f.(*wire.ErrorFrame); ok {
			t.Fatalf("response error %s: %s", e.Code, e.Message)
		}
	}
	return m
}

// mpFrame returns the first frame of type F.
func mpFrame[F wire.Frame](t *testing.T, m *wire.Message) F {
	t.Helper()
	for _, f := range m.Frames {
		if f, ok := f.(F); ok {
			return f
		}
	}
	var zero F
	t.Fatalf("no %T frame in %d frames", zero, len(m.Frames))
	return zero
}

// mpAcquireEpoch runs the epoch acquisition of §2.1.
func mpAcquireEpoch(t *testing.T, base, clientID string) string {
	t.Helper()
	m := mpSync(t, base, &wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}})
	h := mpFrame[*wire.RespHeader](t, m)
	if h.LogEpoch == "" {
		t.Fatalf("acquisition answered %+v", h)
	}
	return h.LogEpoch
}

// mpPushTask pushes a new task of project p1 (a sparse row with every
// column, as a create needs) and returns its commit sequence.
func mpPushTask(t *testing.T, sc *schema.Compiled, base, epoch, clientID, id, title string) int64 {
	t.Helper()
	tbl, _ := sc.Table("tasks")
	n := len(tbl.Columns())
	row := wire.SparseRow{Present: make([]bool, n), Values: make([]wire.Value, n)}
	for col, v := range map[string]wire.Value{
		"id": {Str: id}, "project_id": {Str: "p1"}, "title": {Str: title}, "done": {Bool: false}, "notes": {Null: true},
	} {
		i, ok := tbl.ColumnIndex(col)
		if !ok {
			t.Fatalf("demo schema has no tasks.%s", col)
		}
		row.Present[i], row.Values[i] = true, v
	}
	payload, err := tbl.RowCodec().AppendSparse(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	m := mpSync(t, base, &wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		Commits: []*wire.PushCommit{{ClientCommitID: "commit-" + id,
			Operations: []wire.Operation{{Table: "tasks", RowID: id, Op: wire.OpUpsert, Payload: payload}}}}})
	r := mpFrame[*wire.PushResult](t, m)
	if r.Status != wire.PushApplied || r.CommitSeq <= 0 {
		t.Fatalf("push %s = %+v", id, r)
	}
	return r.CommitSeq
}

// mpSocket is a realtime connection; a goroutine reads its messages.
type mpSocket struct {
	conn interface{ Write([]byte) (int, error) }
	msgs chan mpMessage
	sc   *schema.Compiled
}

type mpMessage struct {
	op   ws.OpCode
	data []byte
	err  error
}

// mpDial opens GET /realtime as clientID, closed at cleanup.
func mpDial(t *testing.T, base, clientID string) *mpSocket {
	t.Helper()
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, br, _, err := d.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/realtime?clientId="+url.QueryEscape(clientID))
	if err != nil {
		t.Fatalf("dial /realtime: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	rw := struct {
		io.Reader
		io.Writer
	}{r, conn}
	s := &mpSocket{conn: conn, msgs: make(chan mpMessage, 64), sc: mpDemoSchema(t)}
	go func() {
		for {
			data, op, err := wsutil.ReadServerData(rw)
			s.msgs <- mpMessage{op: op, data: data, err: err}
			if err != nil {
				close(s.msgs)
				return
			}
		}
	}()
	return s
}

// next returns the next message other than a heartbeat.
func (s *mpSocket) next(t *testing.T, what string) mpMessage {
	t.Helper()
	return s.nextWithin(t, what, 10*time.Second)
}

// nextWithin is next with another bound.
func (s *mpSocket) nextWithin(t *testing.T, what string, d time.Duration) mpMessage {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok || m.err != nil {
				t.Fatalf("waiting for %s: socket closed: %v", what, m.err)
			}
			if m.op == ws.OpText && bytes.Contains(m.data, []byte(`"heartbeat"`)) {
				continue
			}
			return m
		case <-timer.C:
			t.Fatalf("waiting for %s: nothing within %s", what, d)
		}
	}
}

func (s *mpSocket) hello(t *testing.T) wire.Hello {
	t.Helper()
	m := s.next(t, "hello")
	ev, err := wire.ParseServerEvent(m.data)
	if m.op != ws.OpText || err != nil {
		t.Fatalf("first message %q: %v", m.data, err)
	}
	h, ok := ev.(wire.Hello)
	if !ok {
		t.Fatalf("first message = %T %s", ev, m.data)
	}
	return h
}

// wantTask waits for the delta of the commit seq carrying the task, and
// acknowledges it. With wakeOK a catch-up wake for seq or later is
// accepted instead (the commit fell into a listener gap).
func (s *mpSocket) wantTask(t *testing.T, seq int64, id, title string, wakeOK bool) {
	t.Helper()
	s.wantTaskWithin(t, seq, id, title, wakeOK, 10*time.Second)
}

// wantTaskWithin is wantTask with another bound.
func (s *mpSocket) wantTaskWithin(t *testing.T, seq int64, id, title string, wakeOK bool, d time.Duration) {
	t.Helper()
	m := s.nextWithin(t, fmt.Sprintf("the delta of commit %d", seq), d)
	if m.op == ws.OpText {
		ev, err := wire.ParseServerEvent(m.data)
		if w, ok := ev.(wire.Wake); err == nil && ok && wakeOK && w.Reason == wire.WakeCatchupRequired && w.Cursor >= seq {
			t.Logf("commit %d announced by a catch-up wake: %s", seq, m.data)
			return
		}
		t.Fatalf("got %s; want the delta of commit %d", m.data, seq)
	}
	if len(m.data) == 0 || m.data[0] != wire.ChannelTagDelta {
		t.Fatalf("binary message %x; want a delta (tag 0x00)", m.data)
	}
	msg, err := wire.DecodeMessage(m.data[1:], wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatalf("decode delta: %v", err)
	}
	c := mpFrame[*wire.Commit](t, msg)
	if c.CommitSeq != seq || len(c.Changes) != 1 {
		t.Fatalf("delta commit %d with %d changes; want commit %d with 1", c.CommitSeq, len(c.Changes), seq)
	}
	ch := c.Changes[0]
	if int(ch.TableIndex) >= len(c.Tables) || c.Tables[ch.TableIndex] != "tasks" || ch.RowID != id || ch.Op != wire.OpUpsert {
		t.Fatalf("delta change = %+v (tables %v); want an upsert of tasks %s", ch, c.Tables, id)
	}
	tbl, _ := s.sc.Table("tasks")
	vals, err := tbl.RowCodec().DecodeRow(ch.Row)
	if err != nil {
		t.Fatalf("decode delta row: %v", err)
	}
	i, _ := tbl.ColumnIndex("title")
	if vals[i].Str != title {
		t.Fatalf("delta row title = %q; want %q", vals[i].Str, title)
	}
	ack, err := json.Marshal(wire.Ack{Cursor: seq})
	if err != nil {
		t.Fatal(err)
	}
	if err := wsutil.WriteClientText(s.conn, ack); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("ack: %v", err)
	}
}

// TestRealtimeAcrossProcessesThroughPooler is TestRealtimeAcrossProcesses
// with both processes reaching Postgres through a PgBouncer in
// transaction mode (three server connections between them) and their
// listen connections going past it (-db-listen): they find the pooler on
// their own, commits pushed to either reach a socket of the second, and
// a third process whose listen connection goes through the pooler warns
// that it must not.
func TestRealtimeAcrossProcessesThroughPooler(t *testing.T) {
	pgtest.URL(t)
	if testing.Short() {
		t.Skip("builds and runs the syncgo binary")
	}
	t.Parallel()
	sc := mpDemoSchema(t)
	bin := binarytest.Build(t)
	db := pgtest.Database(t, "syncgo_mppool")
	via := pgtest.Bouncer(t, db, "transaction", 3)
	serve := func(name string, args ...string) *binarytest.Process {
		return binarytest.Serve(t, bin, binarytest.Options{Name: name}, append([]string{"-db", via, "-listen", "127.0.0.1:0"}, args...)...)
	}
	first := serve("first", "-db-listen", db)
	second := serve("second", "-db-listen", db)
	for _, p := range []*binarytest.Process{first, second} {
		if !strings.Contains(p.Stderr.String(), "connection pooler") {
			t.Fatalf("%s did not report the pooler; stderr:\n%s", p.Line, p.Stderr)
		}
	}

	epoch, sock := mpSubscribedSocket(t, second.URL, "c2")
	for i := range 12 {
		to := first
		if i%2 == 1 {
			to = second
		}
		id, title := fmt.Sprintf("task-%d", i), fmt.Sprintf("title %d", i)
		seq := mpPushTask(t, sc, to.URL, epoch, "c1", id, title)
		sock.wantTask(t, seq, id, title, false)
	}
	for _, p := range []*binarytest.Process{first, second} {
		if strings.Contains(p.Stderr.String(), "listen connection reaches Postgres through a connection pooler") {
			t.Fatalf("%s warned about its direct listen connection; stderr:\n%s", p.Line, p.Stderr)
		}
	}

	third := serve("third")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(third.Stderr.String(), "listen connection reaches Postgres through a connection pooler") {
		if time.Now().After(deadline) {
			t.Fatalf("a listen connection through the pooler was not warned about; stderr:\n%s", third.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its listener hears nothing through the pooler: it reports itself
	// down rather than listening.
	for {
		_, _, b := fetchURL(t, third.URL+"/readyz")
		body := string(b)
		if strings.Contains(body, `"commitListener":"down"`) && strings.Contains(third.Stderr.String(), "delivers no notifications") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a listen connection through the pooler: /readyz %s; stderr:\n%s", body, third.Stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, _, body := fetchURL(t, first.URL+"/readyz"); !strings.Contains(string(body), `"commitListener":"listening"`) {
		t.Fatalf("first's /readyz = %s; want its direct listener listening", body)
	}
}
