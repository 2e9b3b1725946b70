package syncgo_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// TestRealtimeHelloAtOnce: hello is the first message, sent on connect
// before the client sends anything, with every field of §8.1.
func TestRealtimeHelloAtOnce(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1", title: "one"})
	a := e.peer("alice", "a1")
	cur := a.pull(rtSub("s1", -1, "p1"))["s1"]

	s := e.dial("alice", "a1")
	before := time.Now()
	h := s.hello()
	if h.ProtocolVersion != wire.RealtimeProtocolVersion || h.SessionID == "" || h.ActorID != "alice" ||
		h.ClientID != "a1" || h.Cursor != cur || h.LatestCursor != 1 || h.RequiresSync ||
		h.Timestamp < before.Add(-time.Minute).UnixMilli() {
		t.Fatalf("hello %+v, want protocolVersion 1, actor alice, client a1, cursor %d, latest 1, requiresSync false", h, cur)
	}

	// A client that never pulled: requiresSync, cursor -1.
	n := e.dial("carol", "c1").hello()
	if !n.RequiresSync || n.Cursor != -1 || n.LatestCursor != 1 || n.SessionID == h.SessionID {
		t.Fatalf("hello of a new client %+v, want requiresSync true, cursor -1, a fresh session id", n)
	}
}

// TestRealtimeMessagesWithTheUpgrade: messages the client sends in the same
// TCP write as the upgrade request (so the HTTP server buffers them) are
// served, after hello.
func TestRealtimeMessagesWithTheUpgrade(t *testing.T) {
	e := newRTEnv(t)
	p := e.peer("alice", "a1")
	p.acquireEpoch()
	req := p.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
	var extra []byte
	extra = append(extra, rtClientFrame(ws.OpText, []byte(`{"type":"ack","cursor":0}`))...)
	extra = append(extra, rtClientFrame(ws.OpBinary, append([]byte{wire.ChannelTagRound}, req[:10]...))...)
	extra = append(extra, rtClientFrame(ws.OpBinary, append([]byte{wire.ChannelTagRound}, req[10:]...))...)
	s := e.rawUpgrade("alice", "a1", extra)
	h := s.hello()
	if h.ClientID != "a1" || !h.RequiresSync {
		t.Fatalf("hello %+v", h)
	}
	m, _, _ := s.roundResponse()
	if got := rtCursors(t, m); len(got) != 1 {
		t.Fatalf("round sent with the upgrade: sections %v, want s1", got)
	}
}

// TestRealtimeDeltaAndAck: a registered socket receives a commit of its
// scope as a 0x00 delta, its ack advances the client record, and a commit
// of another scope does not reach it.
func TestRealtimeDeltaAndAck(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1", title: "one"})
	a := e.peer("alice", "a1")
	cur := a.pull(rtSub("s1", -1, "p1"))["s1"]
	if cur != 1 {
		t.Fatalf("pull cursor %d, want 1", cur)
	}
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync || h.Cursor != 1 {
		t.Fatalf("hello %+v, want cursor 1 and no sync required", h)
	}
	s.ack(cur)

	seq := b.push("c2", rtTask{id: "t2", project: "p1", title: "two"})
	d := s.delta()
	if got, want := rtFrameTypes(d), []string{"RESP_HEADER", "SUB_START", "COMMIT", "SUB_END", "END"}; !slices.Equal(got, want) {
		t.Fatalf("delta frames %v, want %v", got, want)
	}
	rows, next := rtDeltaRows(d)
	if !slices.Equal(rows, []string{"t2"}) || next["s1"] != seq {
		t.Fatalf("delta rows %v next %v, want [t2] and s1 → %d", rows, next, seq)
	}
	c := d.Frames[2].(*wire.Commit)
	if c.CommitSeq != seq || c.ActorID != "bob" || len(c.Changes) != 1 || c.Changes[0].Op != wire.OpUpsert {
		t.Fatalf("COMMIT %+v", c)
	}
	vals, err := e.taskCodec().DecodeRow(c.Changes[0].Row)
	if err != nil || vals[2].Str != "two" {
		t.Fatalf("delta row %v %v", vals, err)
	}
	if ss := d.Frames[1].(*wire.SubStart); ss.ID != "s1" || ss.Status != wire.SubActive {
		t.Fatalf("SUB_START %+v", ss)
	}

	s.ack(seq)
	eventually(t, "the ack persisted", func() bool {
		rec, err := e.store.Client(context.Background(), rtPartition, "a1")
		return err == nil && rec.Cursor == seq
	})

	// p2 does not reach A: the next binary message is the p1 commit after it.
	b.push("c3", rtTask{id: "t3", project: "p2", title: "other"})
	seq4 := b.push("c4", rtTask{id: "t4", project: "p1", title: "four"})
	rows, next = rtDeltaRows(s.delta())
	if !slices.Equal(rows, []string{"t4"}) || next["s1"] != seq4 {
		t.Fatalf("after a p2 commit: delta rows %v next %v, want only t4 at %d", rows, next, seq4)
	}
	if st := e.srv.RealtimeStats(); st.Deltas != 2 || st.Wakes != 0 {
		t.Fatalf("stats %+v, want 2 deltas and no wakes", st)
	}
}

// TestRealtimeBehindWakesThenResumes: a session behind at connect gets
// catch-up wakes instead of deltas until it acks the latest cursor.
func TestRealtimeBehindWakesThenResumes(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1"})
	a := e.peer("alice", "a1")
	cur := a.pull(rtSub("s1", -1, "p1"))["s1"]
	b.push("c2", rtTask{id: "t2", project: "p1"}) // A is now behind

	s := e.dial("alice", "a1")
	h := s.hello()
	if !h.RequiresSync || h.Cursor != cur || h.LatestCursor != 2 {
		t.Fatalf("hello %+v, want requiresSync, cursor %d, latest 2", h, cur)
	}
	seq := b.push("c3", rtTask{id: "t3", project: "p1"})
	w := s.wake()
	if w.Reason != wire.WakeCatchupRequired || w.Cursor != seq {
		t.Fatalf("wake %+v, want catchup-required at %d", w, seq)
	}
	var raw map[string]any
	if err := json.Unmarshal(wire.Wake{Cursor: 1, Reason: w.Reason, Timestamp: 1}.AppendJSON(nil), &raw); err != nil || raw["event"] != "sync" {
		t.Fatalf("wake shape %v", raw)
	}

	// A pulls and acks the latest cursor: deltas resume.
	next := a.pull(rtSub("s1", cur, "p1"))["s1"]
	if next != seq {
		t.Fatalf("catch-up pull cursor %d, want %d", next, seq)
	}
	s.ack(next)
	s.barrier()
	seq4 := b.push("c4", rtTask{id: "t4", project: "p1"})
	rows, cursors := rtDeltaRows(s.delta())
	if !slices.Equal(rows, []string{"t4"}) || cursors["s1"] != seq4 {
		t.Fatalf("after the catch-up ack: delta %v %v, want t4 at %d", rows, cursors, seq4)
	}
}

// TestRealtimeSocketRound: rounds over the socket, chunked at arbitrary
// boundaries both ways; push, pull, request-level failures as RESP_HEADER,
// ERROR, END; re-registration at round end.
func TestRealtimeSocketRound(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.Limits.MaxOperationsPerRequest = 3 })
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1", title: "one"})

	s := e.dial("alice", "a1")
	if h := s.hello(); !h.RequiresSync {
		t.Fatalf("hello %+v: a client that never pulled requires a sync", h)
	}
	a := e.peer("alice", "a1")

	// Epoch acquisition over the socket.
	m := s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}, 1, 2, 3)
	if a.epoch == nil || !m.Frames[0].(*wire.RespHeader).ResetRequired {
		t.Fatalf("epoch round: %v", rtFrameTypes(m))
	}

	// A pull of p1, the request split into many small chunks.
	req := a.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
	s.sendRound(req, 1, 7, 1, 5, 13, 2)
	m, _, chunks := s.roundResponse()
	cur := rtCursors(t, m)["s1"]
	if cur != 1 || chunks < 1 {
		t.Fatalf("pull round: cursor %d (%v) in %d chunks", cur, rtFrameTypes(m), chunks)
	}
	s.ack(cur)

	// A push round applies the commit.
	m = s.round(a, &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c1", rtTask{id: "ta", project: "p1", title: "from a"})}}, 4)
	seq := rtPushed(t, m)
	// A's own commit matches its registrations: decided at notify time,
	// while the round runs, it is a catch-up wake (§8.2, §8.7), never a
	// delta, however late the fan-out. Never a 0x00 inside the round:
	// roundResponse checked that.
	if m := s.next(rtWait); m.op != ws.OpText {
		t.Fatalf("after the push round: %v, want a catch-up wake, never a delta of the own commit", m)
	} else if w, ok := s.eventOf(m).(wire.Wake); !ok || w.Cursor != seq || w.Reason != wire.WakeCatchupRequired {
		t.Fatalf("after the push round: %s, want a catch-up wake at %d", m.data, seq)
	}
	if got := b.pull(rtSub("s1", cur, "p1"))["s1"]; got != seq {
		t.Fatalf("B's pull after A's socket push: cursor %d, want %d", got, seq)
	}

	// Request-level failures come back as RESP_HEADER, ERROR, END, and
	// the socket stays usable.
	fail := func(what string, req *wire.Request, code string) {
		t.Helper()
		m := s.round(a, req)
		if got := rtFrameTypes(m); !slices.Equal(got, []string{"RESP_HEADER", "ERROR", "END"}) {
			t.Fatalf("%s: frames %v, want RESP_HEADER ERROR END", what, got)
		}
		if ef := m.Frames[1].(*wire.ErrorFrame); ef.Code != code {
			t.Fatalf("%s: ERROR %s %q, want %s", what, ef.Code, ef.Message, code)
		}
	}
	many := e.pushCommit("a-c2", rtTask{id: "x1", project: "p1"}, rtTask{id: "x2", project: "p1"},
		rtTask{id: "x3", project: "p1"}, rtTask{id: "x4", project: "p1"})
	fail("too many operations", &wire.Request{Commits: []*wire.PushCommit{many}}, syncerr.CodeTooManyOperations)
	fail("another clientId", &wire.Request{Header: &wire.ReqHeader{ClientID: "someone-else", SchemaVersion: 1, LogEpoch: a.epoch},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}, syncerr.CodeInvalidClientID)
	// A request that is not a valid message past a valid envelope header.
	bad := []byte{'S', 'S', 'P', '2', 3, 0, 1, 0, byte(wire.FramePullHeader), 1, 0, 0, 0, 0xff, 0, 0, 0, 0, 0}
	s.sendRound(bad)
	m, _, _ = s.roundResponse()
	if got := rtFrameTypes(m); !slices.Equal(got, []string{"RESP_HEADER", "ERROR", "END"}) {
		t.Fatalf("undecodable request: frames %v", got)
	}

	// Re-registration: a round subscribing p2 makes p2 commits reach the
	// socket without reconnecting.
	seqB := b.push("c2", rtTask{id: "t2", project: "p2", title: "p2 before"})
	m = s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s1", seq, "p1"), rtSub("s2", -1, "p2")}}, 9)
	cs := rtCursors(t, m)
	if cs["s2"] != seqB || cs["s1"] != seqB {
		t.Fatalf("round with s2: cursors %v, want both at %d", cs, seqB)
	}
	s.ack(min(cs["s1"], cs["s2"]))
	s.barrier()
	seqP2 := b.push("c3", rtTask{id: "t3", project: "p2", title: "p2 after"})
	rows, next := rtDeltaRows(s.delta())
	if !slices.Equal(rows, []string{"t3"}) || next["s2"] != seqP2 {
		t.Fatalf("p2 delta after the round: rows %v next %v", rows, next)
	}
}

// TestRealtimeRoundBackToBack: a client may start its next round
// as soon as it has read the previous response's END; the server must not
// mistake it for pipelining. Repeated back-to-back rounds exercise the
// window between the END chunk and the round's bookkeeping.
func TestRealtimeRoundBackToBack(t *testing.T) {
	e := newRTEnv(t)
	s := e.dial("alice", "a1")
	s.hello()
	a := e.peer("alice", "a1")
	s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	for i := range 200 {
		m := s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
		if _, ok := rtCursors(t, m)["s1"]; !ok {
			t.Fatalf("round %d: %v", i, rtFrameTypes(m))
		}
	}
	if st := e.srv.RealtimeStats(); st.ClosedProtocol != 0 {
		t.Fatalf("stats %+v: a legitimate client was closed", st)
	}
}

// TestRealtimeRoundRegistersBeforeEND: a commit pushed as soon as the
// client has read a round's END reaches it under the round's new
// registrations (§8.7: effective immediately), with no ack in between.
func TestRealtimeRoundRegistersBeforeEND(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c0", rtTask{id: "t0", project: "p0"})
	a := e.peer("alice", "a1")
	a.pull(rtSub("s", -1, "p0")) // registered and current at connect: deltas flow
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync {
		t.Fatalf("hello %+v", h)
	}
	for i := range 40 {
		p := "p" + strconv.Itoa(i+1)
		m := s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s", -1, p)}})
		if _, ok := rtCursors(t, m)["s"]; !ok {
			t.Fatalf("round %d: %v", i, rtFrameTypes(m))
		}
		seq := b.push("c"+p, rtTask{id: "t" + p, project: p})
		rows, next := rtDeltaRows(s.delta())
		if !slices.Equal(rows, []string{"t" + p}) || next["s"] != seq {
			t.Fatalf("round %d: delta rows %v next %v, want t%s at %d", i, rows, next, p, seq)
		}
	}
}

// TestRealtimeProtocolViolationsClose: pipelining, bytes after END, a
// stream that is not an SSP2 request and an unknown channel tag close the
// socket with a protocol-error close frame.
func TestRealtimeProtocolViolationsClose(t *testing.T) {
	e := newRTEnv(t)
	a := e.peer("alice", "a1")
	a.acquireEpoch()
	pull := func(p *rtPeer) []byte {
		return p.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
	}

	t.Run("pipelined", func(t *testing.T) {
		release := e.gate("pipe") // the first round waits in ResolveScopes
		defer release()
		p := e.peer("alice", "pipe")
		p.epoch = a.epoch
		s := e.dial("alice", "pipe")
		s.t = t
		s.hello()
		req := pull(p)
		s.sendRound(req)
		s.sendChunk(req[:8]) // the next round before the first one's END
		s.wantClose(ws.StatusProtocolError)
		release()
	})
	t.Run("bytes after END", func(t *testing.T) {
		s := e.dial("alice", "a2")
		s.t = t
		s.hello()
		p := e.peer("alice", "a2")
		p.epoch = a.epoch
		s.sendChunk(append(pull(p), 0x10, 0, 0, 0, 0))
		s.wantClose(ws.StatusProtocolError)
	})
	t.Run("not SSP2", func(t *testing.T) {
		s := e.dial("alice", "a3")
		s.t = t
		s.hello()
		s.sendChunk([]byte("GET / HTTP/1.1\r\n"))
		s.wantClose(ws.StatusProtocolError)
	})
	t.Run("a response envelope", func(t *testing.T) {
		s := e.dial("alice", "a4")
		s.t = t
		s.hello()
		s.sendChunk([]byte{'S', 'S', 'P', '2', 3, 0, byte(wire.KindResponse), 0})
		s.wantClose(ws.StatusProtocolError)
	})
	t.Run("unknown tag", func(t *testing.T) {
		s := e.dial("alice", "a5")
		s.t = t
		s.hello()
		if err := s.write(ws.OpBinary, []byte{0x02, 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		s.wantClose(ws.StatusProtocolError)
	})
	t.Run("delta tag from the client", func(t *testing.T) {
		s := e.dial("alice", "a6")
		s.t = t
		s.hello()
		if err := s.write(ws.OpBinary, append([]byte{wire.ChannelTagDelta}, pull(a)...)); err != nil {
			t.Fatal(err)
		}
		s.wantClose(ws.StatusProtocolError)
	})
	if st := e.srv.RealtimeStats(); st.ClosedProtocol != 6 {
		t.Fatalf("stats %+v, want 6 protocol closes", st)
	}
}

// TestRealtimeCloseActor: the host closes an actor's sockets; other
// actors' stay open.
func TestRealtimeCloseActor(t *testing.T) {
	e := newRTEnv(t)
	a1 := e.dial("alice", "a1")
	a2 := e.dial("alice", "a2")
	b := e.dial("bob", "b1")
	for _, s := range []*rtSock{a1, a2, b} {
		s.hello()
	}
	if n := e.srv.CloseActor(rtPartition, "alice"); n != 2 {
		t.Fatalf("CloseActor closed %d, want 2", n)
	}
	a1.wantClose(ws.StatusPolicyViolation)
	a2.wantClose(ws.StatusPolicyViolation)
	b.barrier() // bob's socket still serves
	eventually(t, "sessions detached", func() bool { return e.srv.RealtimeStats().Sessions == 1 })
}

// TestRealtimeCredentialsExpire: a socket opened with credentials that
// expire is closed at the first heartbeat after the expiry.
func TestRealtimeCredentialsExpire(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.Realtime.Heartbeat = 50 * time.Millisecond })
	// Whole milliseconds: the token carries exp in milliseconds, so the
	// server's expiry is exactly exp, not up to 1 ms before it.
	exp := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	s := e.dial("alice;exp="+strconv.FormatInt(exp.UnixMilli(), 10), "a1")
	other := e.dial("bob", "b1")
	s.hello()
	other.hello()
	code, reason := s.closed(rtWait)
	if code != ws.StatusPolicyViolation {
		t.Fatalf("closed with %d %q, want %d", code, reason, ws.StatusPolicyViolation)
	}
	if time.Now().Before(exp) {
		t.Fatal("closed before the credentials expired")
	}
	// bob's socket lives on and hears heartbeats.
	deadline := time.After(rtWait)
	for {
		select {
		case m := <-other.in:
			if ev, err := wire.ParseServerEvent(m.data); err == nil {
				if _, ok := ev.(wire.Heartbeat); ok {
					return
				}
			}
		case <-other.done:
			t.Fatalf("bob's socket ended: %v", other.endErr)
		case <-deadline:
			t.Fatal("no heartbeat on bob's socket")
		}
	}
}

// TestRealtimeGracefulStop: Stop sends going-away close frames.
func TestRealtimeGracefulStop(t *testing.T) {
	e := newRTEnv(t)
	var socks []*rtSock
	for i := range 20 {
		s := e.dial("alice", "a"+strconv.Itoa(i))
		s.hello()
		socks = append(socks, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rtWait)
	defer cancel()
	if err := e.srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		s.wantClose(ws.StatusGoingAway)
	}
	// After Stop, an upgrade is refused or closed at once.
	s, err := rtDial(context.Background(), rtDialer("alice"), e.wsURL("late"), 16)
	if err == nil {
		s.t, s.clientID = t, "late"
		s.startReading()
		if m, ok := s.tryNext(rtWait); ok && m.op == ws.OpText && json.Valid(m.data) {
			if ev, _ := wire.ParseServerEvent(m.data); ev != nil {
				if _, isHello := ev.(wire.Hello); isHello {
					t.Fatal("a socket opened after Stop got a hello")
				}
			}
		}
		_ = s.nc.Close()
	}
}

// TestRealtimeCommitWithoutChanges: a commit that changes nothing (a
// delete of a missing row) appends nothing and sends no notification, so
// the next commit still arrives as a delta, not a catch-up wake.
func TestRealtimeCommitWithoutChanges(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1"})
	e.peer("alice", "a1").pull(rtSub("s", -1, "p1"))
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync {
		t.Fatalf("hello %+v", h)
	}
	del := &wire.PushCommit{ClientCommitID: "c2", Operations: []wire.Operation{{Table: "tasks", RowID: "missing", Op: wire.OpDelete}}}
	empty := rtPushed(t, b.post(&wire.Request{Commits: []*wire.PushCommit{del}}))
	seq := b.push("c3", rtTask{id: "t3", project: "p1"})
	if seq != empty+1 || empty != 1 {
		t.Fatalf("commit sequences %d, %d; want the no-op at 1 (nothing appended), the next at 2", empty, seq)
	}
	rows, next := rtDeltaRows(s.delta())
	if !slices.Equal(rows, []string{"t3"}) || next["s"] != seq {
		t.Fatalf("delta %v %v, want t3 at %d", rows, next, seq)
	}
	if st := e.srv.RealtimeStats(); st.Wakes != 0 || st.NotificationGap != 0 {
		t.Fatalf("stats %+v: the empty commit was taken for a gap", st)
	}
}

// TestRealtimeConcurrentPushersInOrder: commits pushed concurrently reach
// a socket as contiguous deltas, in sequence order, with no wake.
func TestRealtimeConcurrentPushersInOrder(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b0")
	b.push("c0", rtTask{id: "t0", project: "p1"})
	e.peer("alice", "a1").pull(rtSub("s", -1, "p1"))
	s := e.dial("alice", "a1")
	if h := s.hello(); h.RequiresSync {
		t.Fatalf("hello %+v", h)
	}
	const pushers, each = 8, 25
	errs := make(chan error, pushers)
	for w := range pushers {
		p := e.peer("bob", "b"+strconv.Itoa(w+1))
		p.epoch = b.epoch
		go func() {
			for i := range each {
				id := strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if _, err := p.tryPost(&wire.Request{Commits: []*wire.PushCommit{e.pushCommit("c"+id, rtTask{id: id, project: "p1"})}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	last := int64(1)
	for range pushers * each {
		m := s.next(rtWait)
		if m.op != ws.OpBinary {
			t.Fatalf("after delta %d: %v", last, m)
		}
		_, next := rtDeltaRows(rtDecodeDelta(t, "a1", m))
		if next["s"] != last+1 {
			t.Fatalf("delta at %d after %d", next["s"], last)
		}
		last = next["s"]
	}
	for range pushers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := e.srv.RealtimeStats(); st.Wakes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRealtimeWakeCoalescingKeepsTheLatest: catch-up wakes closer than
// the coalescing window are merged, but the last commit is never left
// without a wake that covers it.
func TestRealtimeWakeCoalescingKeepsTheLatest(t *testing.T) {
	const frozen = int64(1_800_000_000_000)
	e := newRTEnv(t, func(c *syncgo.Config) { c.Now = func() int64 { return frozen } })
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1"})
	e.peer("alice", "a1").pull(rtSub("s", -1, "p1"))
	b.push("c2", rtTask{id: "t2", project: "p1"}) // A is behind
	s := e.dial("alice", "a1")
	if h := s.hello(); !h.RequiresSync {
		t.Fatalf("hello %+v", h)
	}
	s3 := b.push("c3", rtTask{id: "t3", project: "p1"})
	if w := s.wake(); w.Cursor != s3 {
		t.Fatalf("first wake %+v, want cursor %d", w, s3)
	}
	s4 := b.push("c4", rtTask{id: "t4", project: "p1"}) // inside the window: coalesced
	s5 := b.push("c5", rtTask{id: "t5", project: "p1"})
	w := s.wake()
	if w.Cursor != s5 || w.Reason != wire.WakeCatchupRequired {
		t.Fatalf("trailing wake %+v, want catchup-required at %d (after %d)", w, s5, s4)
	}
}

// TestRealtimeRoundSetsDeltaVersion: deltas use the wire version of the
// client's last HTTP round until a socket round completes, then that
// round's version (§8.1), with or without a pull.
func TestRealtimeRoundSetsDeltaVersion(t *testing.T) {
	e := newRTEnv(t)
	b := e.peer("bob", "b1")
	b.push("c1", rtTask{id: "t1", project: "p1"})
	a := e.peer("alice", "a1")
	cur := a.pull(rtSub("s", -1, "p1"))["s"] // at version 3
	s := e.dial("alice", "a1")
	s.hello()
	delta := func(id string) *wire.Message {
		t.Helper()
		seq := b.push("c-"+id, rtTask{id: id, project: "p1"})
		d := s.delta()
		if _, next := rtDeltaRows(d); next["s"] != seq {
			t.Fatalf("delta %v, want %d", next, seq)
		}
		s.ack(seq)
		return d
	}
	if d := delta("t2"); d.Version != wire.Version3 {
		t.Fatalf("delta version %d, want 3", d.Version)
	}
	// A version 2 round with a pull.
	m := s.round(a, &wire.Request{Version: wire.Version2, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s", cur, "p1")}})
	if m.Version != wire.Version2 {
		t.Fatalf("round response version %d", m.Version)
	}
	cur = rtCursors(t, m)["s"]
	s.ack(cur)
	s.barrier()
	d := delta("t3")
	if d.Version != wire.Version2 || d.Frames[0].(*wire.RespHeader).LogEpoch != *a.epoch {
		t.Fatalf("delta after a v2 round: version %d header %+v", d.Version, d.Frames[0])
	}
	// A version 3 round with a push (outside A's scopes) and no pull.
	m = s.round(a, &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c1", rtTask{id: "x", project: "p9"})}})
	if m.Version != wire.Version3 {
		t.Fatalf("push round: version %d frames %v", m.Version, rtFrameTypes(m))
	}
	rtPushed(t, m)
	s.barrier()
	if d := delta("t4"); d.Version != wire.Version3 {
		t.Fatalf("delta after a v3 round: version %d", d.Version)
	}
}

// TestRealtimeConnectFirst: the reference boot order, connect then sync,
// on a partition nobody has used yet: the socket's first round creates
// the partition, and the log epoch it announces is the one deltas carry
// and acks are persisted under.
func TestRealtimeConnectFirst(t *testing.T) {
	e := newRTEnv(t)
	s := e.dial("alice", "a1")
	if h := s.hello(); !h.RequiresSync || h.LatestCursor != 0 {
		t.Fatalf("hello %+v", h)
	}
	a := e.peer("alice", "a1")
	s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	if a.epoch == nil {
		t.Fatal("no epoch from the socket round")
	}
	m := s.round(a, &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s", -1, "p1")}})
	s.ack(rtCursors(t, m)["s"])
	s.barrier()
	b := e.peer("bob", "b1")
	seq := b.push("c1", rtTask{id: "t1", project: "p1"})
	d := s.delta()
	if ep := d.Frames[0].(*wire.RespHeader).LogEpoch; ep != *a.epoch {
		t.Fatalf("delta epoch %q, want %q", ep, *a.epoch)
	}
	s.ack(seq)
	eventually(t, "the ack persisted under the epoch", func() bool {
		rec, err := e.store.Client(context.Background(), rtPartition, "a1")
		return err == nil && rec.Cursor == seq
	})
}
