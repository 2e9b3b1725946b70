package syncgo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// partialRound is the start of a socket round's request stream (§8.7):
// a valid envelope header and the header of a frame declaring n payload
// bytes, with k of them; END never comes.
func partialRound(t *testing.T, n, k int) []byte {
	t.Helper()
	req := &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}}
	b, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), b[:8]...)
	out = append(out, byte(wire.FrameReqHeader))
	out = binary.LittleEndian.AppendUint32(out, uint32(n))
	return append(out, make([]byte, k)...)
}

// A sync round split over several socket messages that stops arriving
// after its first chunk is cut off after the stall timeout, like a
// stalled message or request body: its bytes are not held for as long as
// the socket stays open.
func TestRealtimeStalledRoundTimesOut(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	s := e.dial("mallory", "stall-round")
	s.hello()
	s.sendChunk(partialRound(t, 8<<20, 1<<20))
	s.closed(rtWait)
}

// The same for an operation watch socket: a message whose first fragment
// arrived and whose rest never comes is cut off after the stall timeout
// (the socket's first fragment holds up to Operations.MaxRequestBytes).
func TestWatchStalledFragmentTimesOut(t *testing.T) {
	ops := syncgo.Operations{MaxRequestBytes: 64 << 10, Queries: []syncgo.Query{allTasksQuery()}}
	e := newOpsEnv(t, openSQLite(t), ops, func(c *syncgo.Config) { c.StallTimeout = 300 * time.Millisecond })
	s := dialWatch(t, e, "mallory")
	// The first fragment of a text message (FIN unset); the rest never
	// comes.
	s.writeFrame(ws.Header{Fin: false, OpCode: ws.OpText}, make([]byte, 60<<10))
	select {
	case _, ok := <-s.msgs:
		for ok {
			_, ok = <-s.msgs
		}
	case <-time.After(rtWait):
		t.Fatalf("the watch socket is still open %v after a fragment stalled (stall timeout 300ms)", rtWait)
	}
}

// The realtime hub's per-partition state is kept while the partition has
// sockets or notifications in flight, not for every partition that ever
// had a socket or a commit: a multi-tenant server whose tenants come and
// go keeps no state for the tenants gone.
func TestRealtimePartitionsForgotten(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.Authenticate = func(r *http.Request) (syncgo.Auth, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			actor, part, found := strings.Cut(tok, "@")
			if !ok || !found {
				return syncgo.Auth{}, errors.New("want a bearer token actor@partition")
			}
			return syncgo.Auth{ActorID: actor, Partition: part}, nil
		}
	})
	const tenants = 40
	for i := range tenants {
		part := "tenant-" + strconv.Itoa(i)
		// A tenant with a socket that pushes, then leaves.
		s := e.dial("alice@"+part, "c")
		s.hello()
		e.peer("alice@"+part, "c").push("k"+strconv.Itoa(i), rtTask{id: "t", project: "p", title: "x"})
		_ = s.nc.Close()
		<-s.done
		// A tenant that only pushes over HTTP, with no socket at all.
		e.peer("bob@other-"+part, "d").push("k", rtTask{id: "t", project: "p", title: "x"})
	}
	eventually(t, "every socket detached", func() bool { return e.srv.RealtimeStats().Sessions == 0 })
	deadline := time.Now().Add(rtWait)
	for n := e.srv.RealtimePartitionsForTest(); n != 0; n = e.srv.RealtimePartitionsForTest() {
		if time.Now().After(deadline) {
			t.Fatalf("the realtime hub keeps state for %d partitions after %d tenants came and went, want 0", n, 2*tenants)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOperationsWatchAcrossServersBatch: on Postgres, one notification
// announces a batch of commits (its newest sequence). The first one a
// server's watch hub receives for a partition must rerun the watches of
// every table the batch touched, not only the last commit's: here the
// batch is a labels commit then a tasks commit, pushed in one request
// through another server, and the labels watch must see the label.
func TestOperationsWatchAcrossServersBatch(t *testing.T) {
	a, b := twoOpsServers(t, "syncgo_opsbatch")
	a.awaitWatchListener(t)
	w := dialWatch(t, a.e2eEnv, "alice")
	w.watch("labels", "labelsOf", project("p1"))
	if got := snapshotIDs(t, w.next()); len(got) != 0 {
		t.Fatalf("first snapshot %v", got)
	}
	c := b.client("alice", sspclient.Options{})
	if _, err := c.Upsert("labels", label("l1", "p1", "red")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upsert("tasks", taskRow("t1", "p1", "one")); err != nil {
		t.Fatal(err)
	}
	syncQuiet(t, c)
	seq := b.partitionState().MaxCommitSeq
	m := w.next()
	if !slices.Equal(snapshotIDs(t, m), []string{"l1"}) {
		t.Fatalf("after a labels+tasks batch on the other server: %v (seq %d)", m, seq)
	}
}

// A watch socket refuses frames RFC 6455 forbids without an extension:
// reserved bits set, a fragmented control frame, a control frame over
// 125 bytes. Each closes the socket; none is read as a message (a watch
// sent with a reserved bit set gets no snapshot).
func TestWatchRefusesBadFrames(t *testing.T) {
	ops := syncgo.Operations{Queries: []syncgo.Query{allTasksQuery()}}
	e := newOpsEnv(t, openSQLite(t), ops)
	watch, err := remotewire.Encode(nil, remotewire.Object{{Key: "revision", Value: 1}, {Key: "kind", Value: "watch"},
		{Key: "watchId", Value: "w"}, {Key: "clientId", Value: "c1"}, {Key: "operationId", Value: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		h       ws.Header
		payload []byte
	}{
		{"reserved bit", ws.Header{Fin: true, Rsv: ws.Rsv(true, false, false), OpCode: ws.OpText}, watch},
		{"fragmented ping", ws.Header{Fin: false, OpCode: ws.OpPing}, []byte("x")},
		{"ping over 125 bytes", ws.Header{Fin: true, OpCode: ws.OpPing}, make([]byte, 126)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := dialWatch(t, e, "alice")
			s.writeFrame(c.h, c.payload)
			for {
				select {
				case m, ok := <-s.msgs:
					if !ok {
						return // closed
					}
					t.Fatalf("a message after the bad frame: %v", m)
				case <-time.After(rtWait):
					t.Fatalf("the watch socket is still open %v after the bad frame", rtWait)
				}
			}
		})
	}
}

// allTasksQuery is a query "q" of every task's id, over every scope.
func allTasksQuery() syncgo.Query {
	return syncgo.Query{ID: "q", SQL: "SELECT id FROM tasks ORDER BY id",
		Columns: []syncgo.ResultColumn{{Name: "id", Type: wire.TypeString}}, MaxRows: 10,
		Coverage: func(syncgo.Params) ([]syncgo.Coverage, error) {
			return []syncgo.Coverage{{Table: "tasks", Scopes: map[string][]string{"project_id": {syncgo.AllAllowed}}}}, nil
		}}
}

// writeFrame writes one client frame of h's kind carrying payload,
// masked, as it is (a test's malformed or unfinished frame), in one write:
// a server that closes the socket on the header alone must not fail the
// payload's write.
func (s *watchSock) writeFrame(h ws.Header, payload []byte) {
	s.t.Helper()
	h.Masked, h.Mask, h.Length = true, ws.NewMask(), int64(len(payload))
	masked := slices.Clone(payload)
	ws.Cipher(masked, h.Mask, 0)
	var frame bytes.Buffer
	if err := ws.WriteHeader(&frame, h); err != nil {
		s.t.Fatal(err)
	}
	frame.Write(masked)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.conn.Write(frame.Bytes()); err != nil {
		s.t.Fatal(err)
	}
}

// A watch socket whose queries never change still gets a frame every
// heartbeat (a ping), as docs/deployment.md promises every socket, so a
// proxy's idle timeout above the heartbeat keeps it open.
func TestWatchSocketHeartbeat(t *testing.T) {
	ops := syncgo.Operations{Queries: []syncgo.Query{allTasksQuery()}}
	e := newOpsEnv(t, openSQLite(t), ops, func(c *syncgo.Config) { c.Realtime.Heartbeat = 50 * time.Millisecond })
	u := "ws" + strings.TrimPrefix(e.url, "http") + "/operations/realtime"
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
	conn, br, _, err := d.Dial(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	_ = conn.SetReadDeadline(time.Now().Add(rtWait))
	start := time.Now()
	for pings := 0; pings < 3; {
		h, err := ws.ReadHeader(r)
		if err != nil {
			t.Fatalf("after %d pings in %v: %v", pings, time.Since(start), err)
		}
		if _, err := io.CopyN(io.Discard, r, h.Length); err != nil {
			t.Fatal(err)
		}
		if h.OpCode != ws.OpPing {
			t.Fatalf("frame %v on an idle watch socket; want pings", h.OpCode)
		}
		pings++
	}
}
