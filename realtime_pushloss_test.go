package syncgo_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// A commit applied in a socket round whose client went away before the
// response was written is still fanned out: the round's results cannot
// be written (the socket is closed), but the commits are durable, and a
// subscriber's socket gets the delta of the last one without waiting for
// a later commit of the partition. The round pushes three commits that
// conflict with a row of 40 KB (each result carries the row, so the
// response outgrows the encoder's buffer twice and its writing fails
// after the first result) and then one that applies.
func TestRealtimeRoundClosedMidResponseFansOut(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := &rtEnv{t: t, store: d.open(t), schema: rtSchema(t), gates: map[string]chan struct{}{}}
		e.start(syncgo.Config{Store: e.store, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve,
			RetentionInterval: -1})
		big := strings.Repeat("n", 40<<10)
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
		ps := e.dial("bob", "p1c")
		ps.hello()
		release := e.gate("p1c")
		defer release()
		zero := int64(0)
		req := &wire.Request{}
		for _, id := range []string{"c1", "c2", "c3"} {
			pc := e.pushCommit(id, rtTask{id: "big", project: "p1", title: "mine " + id})
			pc.Operations[0].BaseVersion = &zero
			req.Commits = append(req.Commits, pc)
		}
		req.Commits = append(req.Commits, e.pushCommit("c4", rtTask{id: "fresh", project: "p1", title: "fresh"}))
		body := p.encode(req)
		ps.sendRound(body)
		// The client leaves while the round waits for its scopes; the
		// server's close answer says it saw the close.
		if err := ps.write(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, "")); err != nil {
			t.Fatal(err)
		}
		ps.closed(rtWait)
		release()

		rows, next := rtDeltaRows(os.delta())
		if !slices.Equal(rows, []string{"fresh"}) || next["s"] != cur+1 {
			t.Fatalf("observer delta rows %v next %v, want [fresh] at %d", rows, next, cur+1)
		}
		// The retry answers what the lost response would have.
		m := p.post(&wire.Request{Commits: req.Commits})
		var got []string
		for _, f := range m.Frames {
			if pr, ok := f.(*wire.PushResult); ok {
				got = append(got, pr.ClientCommitID+":"+pr.Status.String())
				if pr.ClientCommitID == "c4" && pr.CommitSeq != cur+1 {
					t.Fatalf("retried c4 has commitSeq %d, want %d", pr.CommitSeq, cur+1)
				}
			}
		}
		if want := []string{"c1:rejected", "c2:rejected", "c3:rejected", "c4:cached"}; !slices.Equal(got, want) {
			t.Fatalf("retry results %v, want %v", got, want)
		}
	})
}
