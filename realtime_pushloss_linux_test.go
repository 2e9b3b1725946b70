//go:build linux

package syncgo_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// Over POST /sync: a client that sends a push and stops reading
// is cut off by the write timeout while its results are written, and the
// commit that applied in the request still reaches a subscriber's socket.
// 63 commits conflict with a row of 128 KiB before it (8 MB of results,
// more than the connection's buffers take when the client's receive
// buffer is 4 KiB).
func TestPushClientStopsReadingFansOut(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := &rtEnv{t: t, store: d.open(t), schema: rtSchema(t), gates: map[string]chan struct{}{}}
		e.start(syncgo.Config{Store: e.store, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve,
			RetentionInterval: -1, WriteTimeout: 200 * time.Millisecond})
		big := strings.Repeat("n", 128<<10)
		e.peer("bob", "seed").push("seed", rtTask{id: "big", project: "p1", title: "big", notes: big})

		o := e.peer("alice", "o1")
		cur := o.pull(rtSub("s", -1, "p1"))["s"]
		os := e.dial("alice", "o1")
		if h := os.hello(); h.RequiresSync {
			t.Fatalf("observer hello %+v", h)
		}
		os.ack(cur)

		p := e.peer("bob", "p1c")
		p.acquireEpoch()
		zero := int64(0)
		req := &wire.Request{}
		for i := range 63 {
			pc := e.pushCommit(fmt.Sprintf("c%d", i), rtTask{id: "big", project: "p1", title: "mine"})
			pc.Operations[0].BaseVersion = &zero
			req.Commits = append(req.Commits, pc)
		}
		req.Commits = append(req.Commits, e.pushCommit("fresh", rtTask{id: "fresh", project: "p1", title: "fresh"}))
		hreq, err := http.NewRequest("POST", e.url+"/sync", bytes.NewReader(p.encode(req)))
		if err != nil {
			t.Fatal(err)
		}
		hreq.Header.Set("Content-Type", syncgo.ProtocolContentType)
		hreq.Header.Set("Authorization", "Bearer bob")
		hreq.Header.Set("Accept-Encoding", "identity")
		dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			return errors.Join(err, serr)
		}}
		conn, err := dialer.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := hreq.Write(conn); err != nil {
			t.Fatal(err)
		}
		// The client reads nothing.

		// Applying and encoding the conflicts takes seconds under -race.
		m, ok := os.tryNext(60 * time.Second)
		if !ok {
			t.Fatalf("the observer got no delta of the applied commit within 60s")
		}
		rows, next := rtDeltaRows(rtDecodeDelta(t, "o1", m))
		if !slices.Equal(rows, []string{"fresh"}) || next["s"] != cur+1 {
			t.Fatalf("observer delta rows %v next %v, want [fresh] at %d", rows, next, cur+1)
		}
	})
}
