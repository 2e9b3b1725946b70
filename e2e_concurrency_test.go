package syncgo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// Overlapping deliveries of one commit run one pipeline (§6.3): eight
// concurrent requests carrying the same clientCommitId get one applied and
// seven cached results, all with the same commitSeq, and the log holds one
// commit.
func TestE2EConcurrentDuplicateDeliveries(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		req := encodeRequest(t, &wire.Request{Version: 3,
			Header:  &wire.ReqHeader{ClientID: "dup-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "dup", Operations: []wire.Operation{e.upsertOp(t, taskRow("t1", "p1", "once"))}}}})

		const n = 8
		results := make([]*wire.PushResult, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := e.post(t, body(req), nil)
				m, err := wire.DecodeMessage(r.body, wire.DecoderOptions{Kind: wire.KindResponse})
				if err != nil || len(m.Frames) < 2 {
					t.Errorf("delivery %d: HTTP %d, %v", i, r.status, err)
					return
				}
				results[i], _ = m.Frames[1].(*wire.PushResult)
			})
		}
		wg.Wait()
		applied, cached := 0, 0
		for i, pr := range results {
			if pr == nil {
				t.Fatalf("delivery %d has no PUSH_RESULT", i)
			}
			switch {
			case pr.Status == wire.PushApplied:
				applied++
			case pr.Status == wire.PushCached:
				cached++
			}
			if pr.CommitSeq != 1 {
				t.Fatalf("delivery %d: %s with commitSeq %d, want commitSeq 1", i, pr.Status, pr.CommitSeq)
			}
		}
		if applied != 1 || cached != n-1 {
			t.Fatalf("%d applied and %d cached of %d deliveries; want 1 and %d", applied, cached, n, n-1)
		}
		if p := e.partitionState(); p.MaxCommitSeq != 1 {
			t.Fatalf("MaxCommitSeq %d, want 1", p.MaxCommitSeq)
		}
	})
}

// Concurrent writers converge: eight clients each push twenty commits
// (inserts, then edits of their own and of a shared row) while pulling;
// the log is dense, and every replica ends equal to the server.
func TestE2EConcurrentWritersConverge(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		const writers, commits = 8, 20
		clients := make([]*sspclient.Client, writers)
		for i := range clients {
			clients[i] = e.client(fmt.Sprintf("actor-%d", i), sspclient.Options{})
			mustSubscribe(t, clients[i], "tasks-p1", "p1")
			syncQuiet(t, clients[i])
		}
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				for j := range commits {
					values := taskRow(fmt.Sprintf("w%d-%02d", i, j%10), "p1", fmt.Sprintf("writer %d commit %d", i, j))
					if j%5 == 4 {
						values = taskRow("shared", "p1", fmt.Sprintf("writer %d", i))
					}
					if _, err := c.Upsert("tasks", values); err != nil {
						t.Errorf("writer %d: %v", i, err)
						return
					}
					if _, err := c.Sync(context.Background()); err != nil {
						t.Errorf("writer %d sync: %v", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, c := range clients {
			for _, o := range c.Outcomes() {
				if o.Status != wire.PushApplied {
					t.Fatalf("client %s commit %s: %s, want applied", c.ClientID(), o.CommitID, statusOf(o))
				}
			}
		}
		if p := e.partitionState(); p.MaxCommitSeq != writers*commits {
			t.Fatalf("MaxCommitSeq %d, want %d", p.MaxCommitSeq, writers*commits)
		}
		server := e.serverRows("tasks")
		for _, c := range clients {
			syncQuiet(t, c)
			sameRows(t, "replica "+c.ClientID(), clientRows(t, c, "tasks"), server)
		}
	})
}
