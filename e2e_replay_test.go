package syncgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Offline replay after a lost response applies once (§2.3, §7.2): the
// server applied the commit but its response never arrived; the client
// sends the same commit again and gets cached with the same commitSeq, and
// the log holds one commit. Every wire version.
func TestE2EReplayAfterLostResponseAppliesOnce(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
				e := newE2EEnv(t, d)
				lost := 0
				ht := newHookTransport(func(x *exchange) ([]byte, error) {
					if len(x.req.Commits) > 0 && lost == 0 {
						lost++
						return nil, errLostResponse
					}
					return nil, nil
				})
				c := e.client("alice", sspclient.Options{WireVersion: v, HTTPClient: ht.client()})
				mustSubscribe(t, c, "tasks-p1", "p1")
				syncQuiet(t, c)

				id := mustUpsert(t, c, taskRow("t1", "p1", "once"))
				if _, err := c.Round(context.Background()); err == nil {
					t.Fatal("the round with the lost response succeeded")
				}
				if c.Pending() != 1 {
					t.Fatalf("after the lost response the outbox holds %d commits, want 1", c.Pending())
				}
				applied := e.partitionState().MaxCommitSeq
				if applied != 1 {
					t.Fatalf("MaxCommitSeq after the first delivery = %d, want 1", applied)
				}

				res, err := c.Round(context.Background())
				if err != nil {
					t.Fatalf("replay round: %v", err)
				}
				o := pushed(t, res, id)
				if o.Status != wire.PushCached || o.CommitSeq != applied {
					t.Fatalf("replay answered %s commitSeq %d; want cached commitSeq %d", statusOf(o), o.CommitSeq, applied)
				}
				syncQuiet(t, c)

				var sends int
				for _, x := range ht.recorded() {
					for _, pc := range x.req.Commits {
						if pc.ClientCommitID == id {
							sends++
						}
					}
				}
				if sends != 2 {
					t.Fatalf("the commit was sent %d times, want 2", sends)
				}
				p := e.partitionState()
				win, err := e.store.ReadCommitWindow(context.Background(), e2ePartition, store.CommitWindowQuery{
					Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}},
					AfterSeq: 0, ThroughSeq: p.MaxCommitSeq})
				if err != nil {
					t.Fatal(err)
				}
				if p.MaxCommitSeq != 1 || len(win.Commits) != 1 || win.Commits[0].ClientCommitID != id {
					t.Fatalf("log holds MaxCommitSeq %d and %d commits; want one commit %s", p.MaxCommitSeq, len(win.Commits), id)
				}
				if r, ok := c.Row("tasks", "t1"); !ok || r.Version != 1 {
					t.Fatalf("client row t1 = %+v, %v; want version 1", r, ok)
				}
				sameRows(t, "client vs server", clientRows(t, c, "tasks"), e.serverRows("tasks"))
			})
		}
	})
}
