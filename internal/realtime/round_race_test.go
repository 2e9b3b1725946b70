package realtime

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// raceWait bounds every wait of these tests.
const raceWait = 10 * time.Second

// raceEnv is a hub over a real engine whose commits are notified to the
// hub, with a gate in the fan-out that holds the commits of actor "a"
// (the socket's client) until released.
type raceEnv struct {
	t      *testing.T
	hub    *Hub
	eng    *engine.Engine
	schema *schema.Compiled
	// held receives the sequence of each gated commit when the fan-out
	// reaches it; release lets the fan-out go on.
	held    chan int64
	release chan struct{}
}

func newRaceEnv(t *testing.T, tweak func(*Config)) *raceEnv {
	t.Helper()
	st, sc := testStore(t)
	if err := st.EnsureSchema(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	e := &raceEnv{t: t, schema: sc, held: make(chan int64, 16), release: make(chan struct{})}
	var h *Hub // set before the first commit
	e.eng = engine.New(engine.Config{Store: st, Schema: sc,
		Resolve: func(context.Context, engine.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		},
		OnCommit: func(n engine.CommitNotice) { h.Notify(n) }})
	cfg := Config{Engine: e.eng, Store: st, WriteTimeout: raceWait}
	if tweak != nil {
		tweak(&cfg)
	}
	h = NewHub(cfg)
	h.beforeFanout = func(n engine.CommitNotice) {
		if n.ActorID == "a" {
			e.held <- n.Seq
			<-e.release
		}
	}
	e.hub = h
	t.Cleanup(h.Close)
	return e
}

// upsert is a PUSH_COMMIT upserting one task.
func (e *raceEnv) upsert(commitID, id, project string) *wire.PushCommit {
	e.t.Helper()
	tbl, _ := e.schema.Table("tasks")
	payload, err := tbl.RowCodec().AppendSparse(nil, wire.SparseRow{Present: []bool{true, true},
		Values: []wire.Value{{Str: id}, {Str: project}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return &wire.PushCommit{ClientCommitID: commitID,
		Operations: []wire.Operation{{Table: "tasks", RowID: id, Op: wire.OpUpsert, Payload: payload}}}
}

type bufResponder struct{ bytes.Buffer }

func (b *bufResponder) Begin(version uint16) (*wire.Encoder, error) {
	return wire.NewEncoder(&b.Buffer, wire.KindResponse, version)
}

// pushAs pushes one commit over the engine directly (an HTTP round, no
// socket involved) and returns its commitSeq.
func (e *raceEnv) pushAs(actor, clientID, commitID, id, project string) int64 {
	e.t.Helper()
	auth := engine.Auth{ActorID: actor, Partition: "p"}
	var epoch *string
	for range 2 { // the first round acquires the log epoch
		var resp bufResponder
		req := &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: epoch}}
		if epoch != nil {
			req.Commits = []*wire.PushCommit{e.upsert(commitID, id, project)}
		} else {
			req.Pull = &wire.PullHeader{Accept: wire.AcceptInlineRows}
		}
		if err := e.eng.Serve(context.Background(), auth, req, &resp); err != nil {
			e.t.Fatal(err)
		}
		m, err := wire.DecodeMessage(resp.Bytes(), wire.DecoderOptions{Kind: wire.KindResponse})
		if err != nil {
			e.t.Fatal(err)
		}
		if epoch == nil {
			ep := m.Frames[0].(*wire.RespHeader).LogEpoch
			epoch = &ep
			continue
		}
		for _, f := range m.Frames {
			if pr, ok := f.(*wire.PushResult); ok && pr.Status == wire.PushApplied {
				return pr.CommitSeq
			}
		}
		e.t.Fatalf("push %s: not applied: %v", commitID, m.Frames)
	}
	return 0
}

// raceMsg is one message the client end received.
type raceMsg struct {
	op   ws.OpCode
	data []byte
}

// raceClient is the client end of a socket attached to the hub.
type raceClient struct {
	t     *testing.T
	nc    net.Conn
	in    chan raceMsg  // what a reader goroutine read (loopback TCP)
	br    *bufio.Reader // or read on demand (a pipe)
	epoch *string
	seen  []raceMsg // text events met while reading a round's response
}

// attach connects client "c" of actor "a" over loopback TCP and reads
// what the server sends on a goroutine.
func (e *raceEnv) attach() *raceClient {
	e.t.Helper()
	cl, sv := tcpPair(e.t)
	c := e.attachConn(cl, sv)
	c.in = make(chan raceMsg, 256)
	go func() {
		defer close(c.in)
		br := bufio.NewReader(cl)
		for {
			f, err := ws.ReadFrame(br)
			if err != nil {
				return
			}
			c.in <- raceMsg{op: f.Header.OpCode, data: f.Payload}
			if f.Header.OpCode == ws.OpClose {
				return
			}
		}
	}()
	return c
}

// attachPipe connects client "c" of actor "a" over an unbuffered pipe
// read only on demand: a client that stops reading holds the server's
// writes at once.
func (e *raceEnv) attachPipe() *raceClient {
	e.t.Helper()
	sv, cl := net.Pipe()
	c := e.attachConn(cl, sv)
	c.br = bufio.NewReader(cl)
	return c
}

func (e *raceEnv) attachConn(cl, sv net.Conn) *raceClient {
	e.t.Helper()
	e.t.Cleanup(func() { _ = cl.Close(); _ = sv.Close() })
	if err := e.hub.Attach(context.Background(), Conn{NetConn: sv, Auth: engine.Auth{ActorID: "a", Partition: "p"},
		ClientID: "c"}); err != nil {
		e.t.Fatal(err)
	}
	return &raceClient{t: e.t, nc: cl}
}

// next returns the next message that is not a heartbeat.
func (c *raceClient) next() raceMsg {
	c.t.Helper()
	for {
		m := c.read()
		if m.op == ws.OpText && strings.Contains(string(m.data), `"event":"heartbeat"`) {
			continue
		}
		return m
	}
}

func (c *raceClient) read() raceMsg {
	c.t.Helper()
	if c.br != nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(raceWait))
		f, err := ws.ReadFrame(c.br)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		return raceMsg{op: f.Header.OpCode, data: f.Payload}
	}
	timer := time.NewTimer(raceWait)
	defer timer.Stop()
	select {
	case m, ok := <-c.in:
		if !ok {
			c.t.Fatal("the connection ended")
		}
		return m
	case <-timer.C:
		c.t.Fatalf("no message within %v", raceWait)
	}
	return raceMsg{}
}

func (c *raceClient) write(op ws.OpCode, b []byte) {
	c.t.Helper()
	if err := wsutil.WriteClientMessage(c.nc, op, b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *raceClient) ack(cursor int64) {
	c.write(ws.OpText, wire.Ack{Cursor: cursor}.AppendJSON(nil))
}

func (c *raceClient) encode(req *wire.Request) []byte {
	c.t.Helper()
	req.Version = wire.Version3
	req.Header = &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: c.epoch}
	b, err := req.MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	return append([]byte{wire.ChannelTagRound}, b...)
}

// round runs one socket round and returns its response. Text events
// received before the response's END are kept in seen; a 0x00 delta
// inside the round fails the test (§8.7).
func (c *raceClient) round(req *wire.Request) *wire.Message {
	c.t.Helper()
	c.write(ws.OpBinary, c.encode(req))
	var stream []byte
	sc := newStreamScanner()
	for !sc.ended {
		m := c.next()
		switch {
		case m.op == ws.OpText:
			c.seen = append(c.seen, m)
		case m.op == ws.OpBinary && len(m.data) > 0 && m.data[0] == wire.ChannelTagRound:
			stream = append(stream, m.data[1:]...)
			sc.feed(m.data[1:])
		default:
			c.t.Fatalf("got op %v %q inside a round, want 0x01 chunks and text events", m.op, m.data)
		}
	}
	msg, err := wire.DecodeMessage(stream, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		c.t.Fatal(err)
	}
	if h, ok := msg.Frames[0].(*wire.RespHeader); ok && h.LogEpoch != "" {
		ep := h.LogEpoch
		c.epoch = &ep
	}
	for _, f := range msg.Frames {
		if ef, ok := f.(*wire.ErrorFrame); ok {
			c.t.Fatalf("round failed: %s %s", ef.Code, ef.Message)
		}
	}
	return msg
}

// subEnd returns the SUB_END cursor of a response's only section.
func subEnd(t *testing.T, m *wire.Message) int64 {
	t.Helper()
	for _, f := range m.Frames {
		if se, ok := f.(*wire.SubEnd); ok {
			return se.NextCursor
		}
	}
	t.Fatal("no SUB_END")
	return 0
}

// deltaSeqs returns the COMMIT sequences of a 0x00 delta.
func deltaSeqs(t *testing.T, data []byte) []int64 {
	t.Helper()
	m, err := wire.DecodeMessage(data[1:], wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, f := range m.Frames {
		if c, ok := f.(*wire.Commit); ok {
			out = append(out, c.CommitSeq)
		}
	}
	return out
}

// only returns the partition's one session.
func (e *raceEnv) only() *session {
	e.t.Helper()
	ss := e.hub.sessionsOf(e.hub.part("p", false))
	if len(ss) != 1 {
		e.t.Fatalf("%d sessions", len(ss))
	}
	return ss[0]
}

// until polls cond on the session, under its lock.
func (e *raceEnv) until(what string, cond func(s *session) bool) {
	e.t.Helper()
	s := e.only()
	deadline := time.Now().Add(raceWait)
	for {
		s.mu.Lock()
		ok := cond(s)
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v", what, raceWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func isWake(m raceMsg) bool {
	if m.op != ws.OpText {
		return false
	}
	ev, err := wire.ParseServerEvent(m.data)
	if err != nil {
		return false
	}
	w, ok := ev.(wire.Wake)
	return ok && w.Reason == wire.WakeCatchupRequired
}

// TestOwnCommitInRoundFannedOutLate: a client that pushes inside its own
// socket round gets a catch-up wake-up before the round's END (§8.2, §8.7
// interleaving) and never a 0x00 delta of that commit, even when the
// fan-out reaches its session only after the round ended — the in-round
// decision is taken when the commit is notified. Deltas resume for a later
// commit made outside a round once the client acks. Both orders of the
// late fan-out and the post-round ack are forced with the fan-out gate.
func TestOwnCommitInRoundFannedOutLate(t *testing.T) {
	for _, ackFirst := range []bool{false, true} {
		name := "fanout-then-ack"
		if ackFirst {
			name = "ack-then-fanout"
		}
		t.Run(name, func(t *testing.T) {
			e := newRaceEnv(t, nil)
			e.pushAs("b", "cb", "b0", "t0", "p1")
			c := e.attach()
			if m := c.next(); m.op != ws.OpText || !strings.Contains(string(m.data), `"event":"hello"`) {
				t.Fatalf("first message %q, want hello", m.data)
			}
			c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the log epoch
			sub := func(cursor int64) []*wire.Subscription {
				return []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: cursor,
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}
			}
			cur := subEnd(t, c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: sub(-1)}))
			c.ack(cur)
			e.until("deltas flowing after the first round", func(s *session) bool { return !s.suppressed && s.observed >= cur })
			c.seen = nil

			// The push round: its commit is notified mid-round, and the
			// gate holds its fan-out until the round has ended.
			m := c.round(&wire.Request{Commits: []*wire.PushCommit{e.upsert("a1", "t1", "p1")},
				Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: sub(cur)})
			own := int64(0)
			for _, f := range m.Frames {
				if pr, ok := f.(*wire.PushResult); ok && pr.Status == wire.PushApplied {
					own = pr.CommitSeq
				}
			}
			if own == 0 || subEnd(t, m) != own {
				t.Fatalf("push round: own commit %d, cursor %d", own, subEnd(t, m))
			}
			woken := false
			for _, m := range c.seen {
				woken = woken || isWake(m)
			}
			if !woken {
				t.Errorf("no catch-up wake before the END of the round that pushed (events %q)", c.seen)
			}
			select {
			case seq := <-e.held:
				if seq != own {
					t.Fatalf("gate held %d, want %d", seq, own)
				}
			case <-time.After(raceWait):
				t.Fatal("the fan-out never reached the gate")
			}
			if ackFirst {
				c.ack(own)
				e.until("the post-round ack", func(s *session) bool { return s.observed >= own && !s.suppressed })
				close(e.release)
			} else {
				close(e.release)
				e.until("the late fan-out", func(s *session) bool { return s.observed >= own })
				c.ack(own)
				e.until("the post-round ack", func(s *session) bool { return !s.suppressed })
			}

			// A commit outside any round: deltas resume, and nothing of
			// the own commit precedes its delta.
			later := e.pushAs("b", "cb", "b1", "t2", "p1")
			for {
				m := c.next()
				if m.op == ws.OpText {
					continue // wake-ups are coalescible and harmless
				}
				if m.op != ws.OpBinary || len(m.data) == 0 || m.data[0] != wire.ChannelTagDelta {
					t.Fatalf("got op %v %q, want a 0x00 delta", m.op, m.data)
				}
				seqs := deltaSeqs(t, m.data)
				if len(seqs) > 0 && seqs[0] == own {
					t.Fatalf("a 0x00 delta of the client's own in-round commit %d after the round", own)
				}
				if len(seqs) != 1 || seqs[0] != later {
					t.Fatalf("delta of %v, want %d", seqs, later)
				}
				break
			}
			if st := e.hub.Stats(); st.DropsInRound == 0 || st.Deltas != 1 {
				t.Fatalf("stats %+v: want the in-round drop and one delta", st)
			}
		})
	}
}

// TestPipelinedRoundClosesWhileResponding: round bytes arriving while a
// round's response is still streaming close the connection with a
// protocol error (§8.7 one round in flight): the read loop keeps reading
// while a round runs. The client stops reading, so the response stays in
// flight behind an unbuffered pipe and a one-message send queue.
func TestPipelinedRoundClosesWhileResponding(t *testing.T) {
	e := newRaceEnv(t, func(c *Config) { c.QueueMessages = 1 })
	for i, id := range []string{"t0", "t1", "t2", "t3"} {
		e.pushAs("b", "cb", "b"+string(rune('0'+i)), id, "p1")
	}
	c := e.attachPipe()
	if m := c.next(); !strings.Contains(string(m.data), `"event":"hello"`) {
		t.Fatalf("first message %q, want hello", m.data)
	}
	c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the log epoch
	req := c.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}})
	c.write(ws.OpBinary, req) // and read nothing until the second request is in

	e.until("the round responding", func(s *session) bool { return s.round != nil && s.round.responding })
	c.write(ws.OpBinary, req)
	for {
		m := c.next()
		if m.op == ws.OpClose {
			code, reason := ws.ParseCloseFrameData(m.data)
			if code != ws.StatusProtocolError {
				t.Fatalf("closed with %d %q, want %d", code, reason, ws.StatusProtocolError)
			}
			break
		}
	}
	if st := e.hub.Stats(); st.ClosedProtocol != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPipelinedRoundAfterPark: a client's second sync round request that
// reaches the socket while the first round responds closes the connection
// with a protocol error, even when the poller took it from the socket and
// the reader it started has not read it yet as the round ends: the
// poller's count of the request it took (wsConn.takenBinary) stands in
// for the bytes gone from the socket. The hooks hold the round's end
// until the poller took the request, and that reader until the round
// ended.
func TestPipelinedRoundAfterPark(t *testing.T) {
	e := newRaceEnv(t, nil)
	var (
		hold   atomic.Bool           // hold the next round's end
		armed  = make(chan struct{}) // closed once the second request is written
		ended  = make(chan struct{}) // closed once the first round ended
		s      atomic.Pointer[session]
		taken  = func() bool { c := s.Load().conn; c.mu.Lock(); defer c.mu.Unlock(); return c.takenBinary > 0 }
		expire = time.After(raceWait)
	)
	e.hub.hooks.roundEnd = func() {
		if !hold.Load() {
			return
		}
		select {
		case <-armed:
		case <-expire:
			return
		}
		for !taken() {
			select {
			case <-expire:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	e.hub.hooks.readPolled = func(takenHere bool) {
		select {
		case <-armed:
		default:
			return
		}
		if takenHere {
			select {
			case <-ended:
			case <-expire:
			}
		}
	}
	e.pushAs("b", "cb", "b0", "t0", "p1")
	c := e.attach()
	if m := c.next(); !strings.Contains(string(m.data), `"event":"hello"`) {
		t.Fatalf("first message %q, want hello", m.data)
	}
	c.round(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}) // the log epoch
	s.Store(e.only())
	hold.Store(true)
	req := c.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}})
	c.write(ws.OpBinary, req)
	e.until("the round responding, the socket parked", func(s *session) bool {
		s.conn.mu.Lock()
		defer s.conn.mu.Unlock()
		return s.round != nil && s.round.responding && s.conn.parked
	})
	close(armed)
	c.write(ws.OpBinary, req)
	e.until("the round ended", func(s *session) bool { return !s.roundActive })
	close(ended)
	for {
		m := c.next()
		if m.op == ws.OpClose {
			if code, reason := ws.ParseCloseFrameData(m.data); code != ws.StatusProtocolError {
				t.Fatalf("closed with %d %q, want %d", code, reason, ws.StatusProtocolError)
			}
			return
		}
	}
}
