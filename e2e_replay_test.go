package syncgo_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
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

// A clientCommitId repeated within one request is applied once; its later
// occurrences answer the persisted result (§6.3): cached with the first's
// commitSeq when it applied, rejected unchanged when it rejected, whatever
// operations they carry. The commits between them and after them apply.
func TestE2EDuplicateCommitIDWithinRequest(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		missing := int64(7)
		bad := e.upsertOp(t, taskRow("t9", "p1", "absent"))
		bad.BaseVersion = &missing
		cs := []*wire.PushCommit{
			{ClientCommitID: "a", Operations: []wire.Operation{e.upsertOp(t, taskRow("t1", "p1", "first"))}},
			{ClientCommitID: "r", Operations: []wire.Operation{bad}},
			{ClientCommitID: "a", Operations: []wire.Operation{e.upsertOp(t, taskRow("t1", "p1", "second"))}},
			{ClientCommitID: "b", Operations: []wire.Operation{e.upsertOp(t, taskRow("t2", "p1", "other"))}},
			{ClientCommitID: "r", Operations: []wire.Operation{e.upsertOp(t, taskRow("t3", "p1", "would apply"))}},
		}
		for _, single := range []bool{false, true} {
			client := "dup-grouped"
			if single {
				client = "dup-single"
			}
			var prs []*wire.PushResult
			if single {
				for _, c := range cs {
					m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
						Header: &wire.ReqHeader{ClientID: client, SchemaVersion: 1, LogEpoch: &epoch}, Commits: []*wire.PushCommit{c}})), nil))
					prs = append(prs, m.Frames[1].(*wire.PushResult))
				}
			} else {
				m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
					Header: &wire.ReqHeader{ClientID: client, SchemaVersion: 1, LogEpoch: &epoch}, Commits: cs})), nil))
				for _, f := range m.Frames {
					if pr, ok := f.(*wire.PushResult); ok {
						prs = append(prs, pr)
					}
				}
			}
			if len(prs) != 5 {
				t.Fatalf("single %v: %d results for 5 commits", single, len(prs))
			}
			if prs[0].Status != wire.PushApplied || prs[2].Status != wire.PushCached || prs[2].CommitSeq != prs[0].CommitSeq ||
				prs[1].Status != wire.PushRejected || prs[1].Results[0].Code != syncerr.CodeRowMissing ||
				prs[4].Status != wire.PushRejected || prs[4].Results[0].Code != syncerr.CodeRowMissing ||
				prs[3].Status != wire.PushApplied || prs[3].CommitSeq != prs[0].CommitSeq+1 {
				for i, pr := range prs {
					t.Logf("%d: %+v", i, pr)
				}
				t.Fatalf("one request per commit %v: want a applied, r rejected sync.row_missing, a cached at a's commitSeq, b applied next, r rejected again", single)
			}
			if rows := e.serverRows("tasks"); len(rows) != 2 || !strings.Contains(rows["t1"], `"title":"first"`) {
				t.Fatalf("single %v: rows %v; want t1 (titled first, the repeated id's operation not applied) and t2", single, rows)
			}
		}
	})
}
