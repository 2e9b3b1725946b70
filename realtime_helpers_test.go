package syncgo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The realtime tests run the server over real sockets: an httptest.Server,
// HTTP rounds built with the wire package and WebSocket clients of
// github.com/gobwas/ws. Nothing waits with a fixed sleep: every wait is on
// a message or a condition, with a deadline.

// rtPartition is the partition of every realtime test actor.
const rtPartition = "rt"

// rtWait is the deadline of one expected message or condition.
const rtWait = 10 * time.Second

// rtEnv is one server over real HTTP on a fresh sqlite store.
type rtEnv struct {
	t      testing.TB
	store  store.Store
	schema *schema.Compiled
	srv    *syncgo.Server
	hs     *httptest.Server
	url    string

	mu    sync.Mutex
	gates map[string]chan struct{} // clientId → ResolveScopes waits for it
	// actorOf names the actor of a client that rtRegister and dialMany
	// set up; nil: every client is alice's.
	actorOf func(clientID string) string
	// deflateChild: the benchmarks' child process offers
	// permessage-deflate on its sockets.
	deflateChild bool
}

// actor is the actor of a client that rtRegister and dialMany set up.
func (e *rtEnv) actor(clientID string) string {
	if e.actorOf != nil {
		return e.actorOf(clientID)
	}
	return "alice"
}

// rtSchema is tasks scoped by project; notes makes big rows possible.
func rtSchema(t testing.TB) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.String("notes").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rtOpenSQLite(t testing.TB) store.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "rt.db"),
		Synchronous: "NORMAL"})
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newRTEnv starts a server; tweak adjusts its Config.
func newRTEnv(t testing.TB, tweak ...func(*syncgo.Config)) *rtEnv {
	t.Helper()
	e := &rtEnv{t: t, store: rtOpenSQLite(t), schema: rtSchema(t), gates: map[string]chan struct{}{}}
	cfg := syncgo.Config{Store: e.store, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve,
		RetentionInterval: -1}
	return e.start(cfg, tweak...)
}

// start starts a server of cfg (tweak adjusts it first) over real HTTP
// for e, stopped at cleanup.
func (e *rtEnv) start(cfg syncgo.Config, tweak ...func(*syncgo.Config)) *rtEnv {
	e.t.Helper()
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
	e.hs = httptest.NewServer(srv.Handler())
	e.t.Cleanup(func() {
		_ = srv.Stop(context.Background())
		e.hs.Close()
	})
	e.url = e.hs.URL
	return e
}

// rtAuth reads "Authorization: Bearer actor[;exp=unixMs]".
func rtAuth(r *http.Request) (syncgo.Auth, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return syncgo.Auth{}, errors.New("no bearer token")
	}
	a := syncgo.Auth{Partition: rtPartition}
	actor, exp, hasExp := strings.Cut(tok, ";exp=")
	a.ActorID = actor
	if hasExp {
		ms, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return syncgo.Auth{}, err
		}
		a.ExpiresAt = time.UnixMilli(ms)
	}
	return a, nil
}

// resolve allows every project; a gated client waits for its gate first.
func (e *rtEnv) resolve(ctx context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
	e.mu.Lock()
	g := e.gates[req.ClientID]
	e.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return map[string][]string{"project_id": {"*"}}, nil
}

// gate makes ResolveScopes block for a client until the returned func runs.
func (e *rtEnv) gate(clientID string) (release func()) {
	ch := make(chan struct{})
	e.mu.Lock()
	e.gates[clientID] = ch
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.gates, clientID)
			e.mu.Unlock()
			close(ch)
		})
	}
}

// rtTask is one tasks row.
type rtTask struct{ id, project, title, notes string }

func (e *rtEnv) taskCodec() *wire.RowCodec {
	tbl, _ := e.schema.Table("tasks")
	return tbl.RowCodec()
}

// pushCommit builds a PUSH_COMMIT upserting full rows.
func (e *rtEnv) pushCommit(commitID string, rows ...rtTask) *wire.PushCommit {
	e.t.Helper()
	pc := &wire.PushCommit{ClientCommitID: commitID}
	for _, r := range rows {
		vals := []wire.Value{{Str: r.id}, {Str: r.project}, {Str: r.title}, {Bool: false}, {Null: true},
			{Str: r.notes, Null: r.notes == ""}}
		present := make([]bool, len(vals))
		for i := range present {
			present[i] = true
		}
		payload, err := e.taskCodec().AppendSparse(nil, wire.SparseRow{Present: present, Values: vals})
		if err != nil {
			e.t.Fatal(err)
		}
		pc.Operations = append(pc.Operations, wire.Operation{Table: "tasks", RowID: r.id, Op: wire.OpUpsert, Payload: payload})
	}
	return pc
}

// rtSub is a tasks subscription over projects.
func rtSub(id string, cursor int64, projects ...string) *wire.Subscription {
	return &wire.Subscription{ID: id, Table: "tasks", Cursor: cursor,
		Scopes: wire.ScopeMap{{Key: "project_id", Values: projects}}}
}

// rtPeer is an SSP2 client identity (actor, clientId) speaking HTTP or a
// socket round; it remembers the partition's log epoch.
type rtPeer struct {
	env      *rtEnv
	actor    string
	clientID string
	epoch    *string
}

func (e *rtEnv) peer(actor, clientID string) *rtPeer {
	return &rtPeer{env: e, actor: actor, clientID: clientID}
}

// encode fills the request header and encodes it.
func (p *rtPeer) encode(req *wire.Request) []byte {
	p.env.t.Helper()
	if req.Version == 0 {
		req.Version = wire.Version3
	}
	if req.Header == nil {
		req.Header = &wire.ReqHeader{ClientID: p.clientID, SchemaVersion: 1, LogEpoch: p.epoch}
	}
	b, err := req.MarshalBinary()
	if err != nil {
		p.env.t.Fatal(err)
	}
	return b
}

// observe records the epoch a response announces.
func (p *rtPeer) observe(m *wire.Message) {
	if len(m.Frames) > 0 {
		if h, ok := m.Frames[0].(*wire.RespHeader); ok && h.LogEpoch != "" {
			ep := h.LogEpoch
			p.epoch = &ep
		}
	}
}

// post sends a request over POST /sync.
func (p *rtPeer) post(req *wire.Request) *wire.Message {
	p.env.t.Helper()
	m, err := p.tryPost(req)
	if err != nil {
		p.env.t.Fatal(err)
	}
	return m
}

func (p *rtPeer) tryPost(req *wire.Request) (*wire.Message, error) {
	body := p.encode(req)
	hreq, err := http.NewRequest("POST", p.env.url+"/sync", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hreq.Header.Set("Authorization", "Bearer "+p.actor)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /sync: %d %s", resp.StatusCode, raw)
	}
	m, err := wire.DecodeMessage(raw, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		return nil, fmt.Errorf("decode response: %v", err)
	}
	p.observe(m)
	return m, nil
}

// acquireEpoch runs the epoch acquisition round over HTTP.
func (p *rtPeer) acquireEpoch() {
	p.env.t.Helper()
	p.post(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	if p.epoch == nil {
		p.env.t.Fatal("no log epoch announced")
	}
}

// pull pulls subscriptions over HTTP and returns their next cursors.
func (p *rtPeer) pull(subs ...*wire.Subscription) map[string]int64 {
	p.env.t.Helper()
	if p.epoch == nil {
		p.acquireEpoch()
	}
	return rtCursors(p.env.t, p.post(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: subs}))
}

// push pushes one commit over HTTP and returns its commitSeq.
func (p *rtPeer) push(commitID string, rows ...rtTask) int64 {
	p.env.t.Helper()
	if p.epoch == nil {
		p.acquireEpoch()
	}
	return rtPushed(p.env.t, p.post(&wire.Request{Commits: []*wire.PushCommit{p.env.pushCommit(commitID, rows...)}}))
}

// rtCursors returns the SUB_END cursors of a pull response by subscription.
func rtCursors(t testing.TB, m *wire.Message) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	cur := ""
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.SubStart:
			cur = f.ID
		case *wire.SubEnd:
			out[cur] = f.NextCursor
		case *wire.ErrorFrame:
			t.Fatalf("ERROR frame %s: %s", f.Code, f.Message)
		}
	}
	return out
}

// rtPushed returns the commitSeq of the one applied PUSH_RESULT.
func rtPushed(t testing.TB, m *wire.Message) int64 {
	t.Helper()
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.PushResult:
			if f.Status != wire.PushApplied {
				t.Fatalf("push: status %v", f.Status)
			}
			return f.CommitSeq
		case *wire.ErrorFrame:
			t.Fatalf("push: ERROR frame %s: %s", f.Code, f.Message)
		}
	}
	t.Fatal("push: no PUSH_RESULT")
	return 0
}

// rtMsg is one message a socket received: a text event or a binary
// message (tag first).
type rtMsg struct {
	op   ws.OpCode
	data []byte
	at   time.Time
	// compressed: the message came compressed (RSV1, permessage-deflate)
	// and data is what it inflated to (deflate sockets only).
	compressed bool
}

func (m rtMsg) String() string {
	if m.op == ws.OpText {
		return "text " + string(m.data)
	}
	if len(m.data) == 0 {
		return "empty binary"
	}
	return fmt.Sprintf("binary tag 0x%02x, %d bytes", m.data[0], len(m.data))
}

// rtSock is a WebSocket client of the realtime channel. A reader
// goroutine queues what the server sends; a "quiet" socket reads nothing.
type rtSock struct {
	t        testing.TB
	clientID string
	nc       net.Conn
	r        io.Reader
	wmu      sync.Mutex
	in       chan rtMsg
	done     chan struct{}
	endErr   error // set before done closes: wsutil.ClosedError or a read error
	pending  []rtMsg
	// deflate: the socket negotiated permessage-deflate; its data
	// messages are sent compressed (see realtime_deflate_test.go).
	deflate bool
}

// rtDialer returns the Dialer of an actor's token.
func rtDialer(token string) ws.Dialer {
	return ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": []string{"Bearer " + token}}),
		Timeout: rtWait}
}

func (e *rtEnv) wsURL(clientID string) string {
	return "ws" + strings.TrimPrefix(e.url, "http") + "/realtime?clientId=" + clientID
}

// dial connects a socket and starts reading it.
func (e *rtEnv) dial(token, clientID string) *rtSock {
	e.t.Helper()
	s := e.dialWith(rtDialer(token), clientID)
	s.startReading()
	return s
}

// dialWith connects a socket without reading it.
func (e *rtEnv) dialWith(d ws.Dialer, clientID string) *rtSock {
	e.t.Helper()
	s, err := rtDial(context.Background(), d, e.wsURL(clientID), 256)
	if err != nil {
		e.t.Fatalf("dial %s: %v", clientID, err)
	}
	s.t, s.clientID = e.t, clientID
	e.t.Cleanup(func() { _ = s.nc.Close() })
	return s
}

func rtDial(ctx context.Context, d ws.Dialer, url string, buffer int) (*rtSock, error) {
	nc, br, hs, err := d.Dial(ctx, url)
	if err != nil {
		return nil, err
	}
	if len(d.Extensions) > 0 && len(hs.Extensions) == 0 {
		_ = nc.Close()
		return nil, errors.New("the server declined the extensions offered")
	}
	s := &rtSock{nc: nc, r: bufio.NewReaderSize(nc, 4096), in: make(chan rtMsg, buffer), done: make(chan struct{})}
	if br != nil {
		s.r = br // holds what the server sent with the handshake (hello)
	}
	return s, nil
}

func (s *rtSock) startReading() { go s.readLoop() }

// readFirst reads the next server message now, before startReading, and
// keeps it for next: a test that leaves a socket unread (a slow
// consumer) first waits for its hello, so that its session has started
// (read the partition) before the commits it is to receive.
func (s *rtSock) readFirst() {
	s.t.Helper()
	_ = s.nc.SetReadDeadline(time.Now().Add(rtWait))
	data, op, err := wsutil.ReadServerData(struct {
		io.Reader
		io.Writer
	}{s.r, io.Discard})
	_ = s.nc.SetReadDeadline(time.Time{})
	if err != nil {
		s.t.Fatalf("%s: first message: %v", s.clientID, err)
	}
	s.pending = append(s.pending, rtMsg{op: op, data: data, at: time.Now()})
}

// readLoop reads server messages with wsutil.ReadServerData until the
// connection ends. Replies to control frames are discarded: the test
// observes the server's close frame, it does not need to echo it.
func (s *rtSock) readLoop() {
	defer close(s.done)
	rw := struct {
		io.Reader
		io.Writer
	}{s.r, io.Discard}
	for {
		data, op, err := wsutil.ReadServerData(rw)
		if err != nil {
			s.endErr = err
			return
		}
		s.in <- rtMsg{op: op, data: data, at: time.Now()}
	}
}

// write sends one masked client message.
func (s *rtSock) write(op ws.OpCode, payload []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.deflate && (op == ws.OpText || op == ws.OpBinary) {
		return writeDeflated(s.nc, op, payload)
	}
	return wsutil.WriteClientMessage(s.nc, op, payload)
}

func (s *rtSock) ack(cursor int64) {
	s.t.Helper()
	if err := s.write(ws.OpText, wire.Ack{Cursor: cursor}.AppendJSON(nil)); err != nil {
		s.t.Fatalf("%s: write ack: %v", s.clientID, err)
	}
}

// publish sends a presence document (nil doc: leave).
func (s *rtSock) publish(key string, doc any) {
	s.t.Helper()
	var raw json.RawMessage
	if doc != nil {
		b, err := json.Marshal(doc)
		if err != nil {
			s.t.Fatal(err)
		}
		raw = b
	}
	if err := s.write(ws.OpText, wire.PresencePublish{ScopeKey: key, Doc: raw}.AppendJSON(nil)); err != nil {
		s.t.Fatalf("%s: write presence: %v", s.clientID, err)
	}
}

// next returns the next message that is not a heartbeat.
func (s *rtSock) next(d time.Duration) rtMsg {
	s.t.Helper()
	m, ok := s.tryNext(d)
	if !ok {
		s.t.Fatalf("%s: no message within %v (connection end: %v)", s.clientID, d, s.endErrIfDone())
	}
	return m
}

// tryNext returns the next non-heartbeat message, or false when none came
// in d or the connection ended.
func (s *rtSock) tryNext(d time.Duration) (rtMsg, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var m rtMsg
		if len(s.pending) > 0 {
			m, s.pending = s.pending[0], s.pending[1:]
		} else {
			select {
			case m = <-s.in:
			case <-timer.C:
				return rtMsg{}, false
			case <-s.done:
				select {
				case m = <-s.in:
				default:
					return rtMsg{}, false
				}
			}
		}
		if m.op == ws.OpText && bytes.Contains(m.data, []byte(`"event":"heartbeat"`)) {
			continue
		}
		return m, true
	}
}

func (s *rtSock) endErrIfDone() error {
	select {
	case <-s.done:
		return s.endErr
	default:
		return errors.New("still open")
	}
}

// event returns the next message, which must be a text event.
func (s *rtSock) event() wire.ServerEvent {
	s.t.Helper()
	return s.eventOf(s.next(rtWait))
}

// eventOf parses m, which must be a text event.
func (s *rtSock) eventOf(m rtMsg) wire.ServerEvent {
	s.t.Helper()
	if m.op != ws.OpText {
		s.t.Fatalf("%s: got %v, want a text event", s.clientID, m)
	}
	ev, err := wire.ParseServerEvent(m.data)
	if err != nil {
		s.t.Fatalf("%s: event %s: %v", s.clientID, m.data, err)
	}
	return ev
}

// hello returns the first message, which must be hello.
func (s *rtSock) hello() wire.Hello {
	s.t.Helper()
	ev := s.event()
	h, ok := ev.(wire.Hello)
	if !ok {
		s.t.Fatalf("%s: first message %T %+v, want hello", s.clientID, ev, ev)
	}
	return h
}

// delta returns the next message, which must be a 0x00 delta, decoded.
func (s *rtSock) delta() *wire.Message {
	s.t.Helper()
	m := s.next(rtWait)
	return rtDecodeDelta(s.t, s.clientID, m)
}

func rtDecodeDelta(t testing.TB, who string, m rtMsg) *wire.Message {
	t.Helper()
	if m.op != ws.OpBinary || len(m.data) == 0 || m.data[0] != wire.ChannelTagDelta {
		t.Fatalf("%s: got %v, want a 0x00 delta", who, m)
	}
	msg, err := wire.DecodeMessage(m.data[1:], wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatalf("%s: decode delta: %v", who, err)
	}
	return msg
}

// wake returns the next message, which must be a wake-up.
func (s *rtSock) wake() wire.Wake {
	s.t.Helper()
	ev := s.event()
	w, ok := ev.(wire.Wake)
	if !ok {
		s.t.Fatalf("%s: got %T %+v, want a sync wake-up", s.clientID, ev, ev)
	}
	return w
}

// barrier makes sure the server processed everything sent before: the
// read loop handles client messages in order, and a presence publish on a
// key the socket does not hold is answered at once with presence.forbidden.
func (s *rtSock) barrier() {
	s.t.Helper()
	s.publish("barrier:x", map[string]any{})
	for {
		ev := s.event()
		if pe, ok := ev.(wire.PresenceError); ok && pe.ScopeKey == "barrier:x" {
			return
		}
		s.t.Fatalf("%s: got %T %+v while waiting for the barrier", s.clientID, ev, ev)
	}
}

// closed waits for the connection to end and returns the server's close
// status (0 if it ended without a close frame).
func (s *rtSock) closed(d time.Duration) (ws.StatusCode, string) {
	s.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m := <-s.in:
			s.pending = append(s.pending, m)
			continue
		case <-timer.C:
			s.t.Fatalf("%s: still open after %v", s.clientID, d)
		case <-s.done:
		}
		var ce wsutil.ClosedError
		if errors.As(s.endErr, &ce) {
			return ce.Code, ce.Reason
		}
		return 0, s.endErr.Error()
	}
}

// wantClose waits for a close frame with code.
func (s *rtSock) wantClose(code ws.StatusCode) {
	s.t.Helper()
	got, reason := s.closed(rtWait)
	if got != code {
		s.t.Fatalf("%s: closed with %d %q, want a close frame with status %d", s.clientID, got, reason, code)
	}
}

// roundBytes sends req as 0x01 chunks of the given sizes (the rest in one
// last chunk).
func (s *rtSock) sendRound(req []byte, sizes ...int) {
	s.t.Helper()
	for _, n := range sizes {
		if n > len(req) {
			n = len(req)
		}
		s.sendChunk(req[:n])
		req = req[n:]
	}
	if len(req) > 0 {
		s.sendChunk(req)
	}
}

func (s *rtSock) sendChunk(b []byte) {
	s.t.Helper()
	msg := append([]byte{wire.ChannelTagRound}, b...)
	if err := s.write(ws.OpBinary, msg); err != nil {
		s.t.Fatalf("%s: write chunk: %v", s.clientID, err)
	}
}

// roundResponse reads 0x01 chunks until the response's END and decodes
// them; text events met meanwhile are returned too. It fails on a delta
// inside the round (§8.7) and on bytes past END.
func (s *rtSock) roundResponse() (*wire.Message, []rtMsg, int) {
	s.t.Helper()
	var stream []byte
	var events []rtMsg
	chunks := 0
	for {
		m := s.next(rtWait)
		if m.op == ws.OpText {
			events = append(events, m)
			continue
		}
		if len(m.data) == 0 || m.data[0] != wire.ChannelTagRound {
			s.t.Fatalf("%s: got %v inside a round, want 0x01 chunks only", s.clientID, m)
		}
		chunks++
		stream = append(stream, m.data[1:]...)
		if end, ok := rtStreamEnd(stream); ok {
			if end != len(stream) {
				s.t.Fatalf("%s: the final chunk has %d bytes past END", s.clientID, len(stream)-end)
			}
			msg, err := wire.DecodeMessage(stream, wire.DecoderOptions{Kind: wire.KindResponse})
			if err != nil {
				s.t.Fatalf("%s: decode round response: %v", s.clientID, err)
			}
			// Text events interleave freely (§8.7): keep them for the
			// caller's next reads, in order.
			s.pending = append(append([]rtMsg(nil), events...), s.pending...)
			return msg, events, chunks
		}
	}
}

// rtStreamEnd walks the frames of a message stream and returns the offset
// just past END once END is complete.
func rtStreamEnd(b []byte) (int, bool) {
	off := 8
	for off+5 <= len(b) {
		t := b[off]
		n := int(uint32(b[off+1]) | uint32(b[off+2])<<8 | uint32(b[off+3])<<16 | uint32(b[off+4])<<24)
		if t == 0 {
			return off + 5, true
		}
		if off+5+n > len(b) {
			return 0, false
		}
		off += 5 + n
	}
	return 0, false
}

// round runs one request over the socket.
func (s *rtSock) round(p *rtPeer, req *wire.Request, sizes ...int) *wire.Message {
	s.t.Helper()
	s.sendRound(p.encode(req), sizes...)
	m, _, _ := s.roundResponse()
	p.observe(m)
	return m
}

// rtFrameTypes lists a message's frame types, END included.
func rtFrameTypes(m *wire.Message) []string {
	out := make([]string, 0, len(m.Frames)+1)
	for _, f := range m.Frames {
		out = append(out, f.Type().Name())
	}
	return append(out, "END")
}

// rtDeltaRows returns the row ids of a delta's COMMITs and its SUB_END
// cursors by subscription.
func rtDeltaRows(m *wire.Message) (rows []string, next map[string]int64) {
	next = map[string]int64{}
	cur := ""
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.SubStart:
			cur = f.ID
		case *wire.Commit:
			for _, ch := range f.Changes {
				rows = append(rows, ch.RowID)
			}
		case *wire.SubEnd:
			next[cur] = f.NextCursor
		}
	}
	return rows, next
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(rtWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, rtWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawUpgrade opens a socket by hand and writes the upgrade request and
// extra bytes in one write, so frames arrive with the handshake.
func (e *rtEnv) rawUpgrade(token, clientID string, extra []byte) *rtSock {
	e.t.Helper()
	s, _ := e.handUpgrade(token, clientID, "", extra)
	s.startReading()
	return s
}

// handUpgrade opens a socket by hand: the upgrade request, with a
// Sec-WebSocket-Extensions header offering offer when it is not empty,
// and extra bytes after it in the same write. It returns the socket, not
// read yet, and the response's Sec-WebSocket-Extensions.
func (e *rtEnv) handUpgrade(token, clientID, offer string, extra []byte) (*rtSock, string) {
	e.t.Helper()
	host := strings.TrimPrefix(e.url, "http://")
	nc, err := net.Dial("tcp", host)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = nc.Close() })
	req := "GET /realtime?clientId=" + clientID + " HTTP/1.1\r\nHost: " + host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" +
		"\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer " + token + "\r\n"
	if offer != "" {
		req += "Sec-WebSocket-Extensions: " + offer + "\r\n"
	}
	if _, err := nc.Write(append([]byte(req+"\r\n"), extra...)); err != nil {
		e.t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		e.t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	ext := resp.Header.Get("Sec-WebSocket-Extensions")
	return &rtSock{t: e.t, clientID: clientID, nc: nc, r: br, in: make(chan rtMsg, 256), done: make(chan struct{}),
		deflate: ext != ""}, ext
}

// rtClientFrame encodes one masked client frame.
func rtClientFrame(op ws.OpCode, payload []byte) []byte {
	var buf bytes.Buffer
	if err := wsutil.WriteClientMessage(&buf, op, payload); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
