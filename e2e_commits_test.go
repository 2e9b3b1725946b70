package syncgo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Commit-level validation rejects only its commit and the batch goes on
// (§1.7, §6.4): in one request, an operation on an unknown table and a
// payload that does not decode are rejected with their codes, a valid
// commit applies, and its id repeated later in the same request is
// answered cached with the same commitSeq (§6.3). A replayed rejection
// replays as itself.
func TestE2ECommitLevelRejections(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		valid := e.upsertOp(t, taskRow("t1", "p1", "valid"))
		unknown := valid
		unknown.Table = "nope"
		garbled := valid
		garbled.Payload = []byte{0xff}
		req := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "batch-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{
				{ClientCommitID: "c-unknown", Operations: []wire.Operation{valid, unknown}},
				{ClientCommitID: "c-garbled", Operations: []wire.Operation{garbled}},
				{ClientCommitID: "c-valid", Operations: []wire.Operation{valid}},
				{ClientCommitID: "c-valid", Operations: []wire.Operation{valid}},
			}}
		want := []struct {
			status wire.PushStatus
			code   string
			opIdx  int32
		}{
			{wire.PushRejected, syncerr.CodeUnknownTable, 1},
			{wire.PushRejected, syncerr.CodeInvalidRequest, 0},
			{wire.PushApplied, "", 0},
			{wire.PushCached, "", 0},
		}
		check := func(round string, m *wire.Message) {
			t.Helper()
			var results []*wire.PushResult
			for _, f := range m.Frames {
				if pr, ok := f.(*wire.PushResult); ok {
					results = append(results, pr)
				}
			}
			if len(results) != len(want) {
				t.Fatalf("%s: %d PUSH_RESULTs, want %d", round, len(results), len(want))
			}
			for i, w := range want {
				pr := results[i]
				got := ""
				if pr.Status == wire.PushRejected {
					if len(pr.Results) != 1 || pr.Results[0].OpIndex != w.opIdx {
						t.Fatalf("%s: commit %d results %+v; want one record at op %d", round, i, pr.Results, w.opIdx)
					}
					got = pr.Results[0].Code
				}
				if pr.Status != w.status || got != w.code {
					t.Fatalf("%s: commit %s answered %s %q, want %s %q", round, pr.ClientCommitID, pr.Status, got, w.status, w.code)
				}
				if w.status != wire.PushRejected && pr.CommitSeq != 1 {
					t.Fatalf("%s: commit %s has commitSeq %d, want 1", round, pr.ClientCommitID, pr.CommitSeq)
				}
			}
		}
		check("first delivery", decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		if p := e.partitionState(); p.MaxCommitSeq != 1 {
			t.Fatalf("MaxCommitSeq %d, want 1: only the valid commit applies", p.MaxCommitSeq)
		}
		want[2].status = wire.PushCached // a replay of the whole batch
		check("replay", decodeResponse(t, e.post(t, body(encodeRequest(t, req)), nil)))
		if p := e.partitionState(); p.MaxCommitSeq != 1 {
			t.Fatalf("after the replay MaxCommitSeq is %d, want 1", p.MaxCommitSeq)
		}
		if rows := e.serverRows("tasks"); len(rows) != 1 || rows["t1"] != e.renderTask(t, 1, taskRow("t1", "p1", "valid")) {
			t.Fatalf("server rows %v; want t1 alone at version 1", rows)
		}
	})
}

// An unversioned upsert over a deleted row whose payload names a scope
// the actor does not hold gets sync.forbidden, as any other row it may not
// write, not sync.row_deleted (§6.2's table discloses absence after payload
// authorization); in the actor's own scope it gets sync.row_deleted. (A
// patch that names no scope column is answered sync.row_deleted, as the
// catalog's delete-precedence scenarios expect.)
func TestE2ERowDeletedAfterPayloadAuthorization(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		e.allow("mallory", map[string][]string{"project_id": {"p2"}})
		a := e.client("alice", sspclient.Options{})
		mustUpsert(t, a, taskRow("t1", "p1", "doomed"))
		syncQuiet(t, a)
		if _, err := a.Delete("tasks", "t1"); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, a)
		m := e.client("mallory", sspclient.Options{})
		syncQuiet(t, m)
		probe := mustUpsert(t, m, taskRow("t1", "p1", "was t1 deleted?"))
		res, err := m.Push(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, probe); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeForbidden {
			t.Fatalf("unversioned upsert into another scope over a deleted row: %s, want rejected %s",
				statusOf(o), syncerr.CodeForbidden)
		}
		again := mustUpsert(t, a, taskRow("t1", "p1", "alice did not see her own delete"))
		res, err = a.Push(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, again); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeRowDeleted {
			t.Fatalf("unversioned upsert in the actor's own scope over a deleted row: %s, want rejected %s",
				statusOf(o), syncerr.CodeRowDeleted)
		}
	})
}

// A delete beats a concurrent unversioned upsert (§6.2): B, which has not
// seen A's delete, upserts the row without a baseVersion and is rejected
// with sync.row_deleted; an explicit recreate (baseVersion 0) succeeds.
// Both replicas then converge.
func TestE2EDeleteBeatsUnversionedUpsert(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		a := e.client("alice", sspclient.Options{})
		b := e.client("bob", sspclient.Options{LimitCommits: 2})
		mustSubscribe(t, a, "tasks-p1", "p1")
		mustSubscribe(t, b, "tasks-p1", "p1")
		mustUpsert(t, a, taskRow("t1", "p1", "doomed"))
		syncQuiet(t, a)
		syncQuiet(t, b)

		if _, err := a.Delete("tasks", "t1"); err != nil {
			t.Fatal(err)
		}
		for i := range 5 { // more commits than B's limitCommits
			mustUpsert(t, a, taskRow(fmt.Sprintf("n%d", i), "p1", "noise"))
		}
		syncQuiet(t, a)

		stale := mustUpsert(t, b, taskRow("t1", "p1", "B did not see the delete"))
		res, err := b.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if o := pushed(t, res, stale); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeRowDeleted {
			t.Fatalf("unversioned upsert over a delete: %s, want rejected %s", statusOf(o), syncerr.CodeRowDeleted)
		}
		if s := sectionOf(t, res, "tasks-p1"); s.Changes != 2 {
			t.Fatalf("limitCommits 2 delivered %d changes of the 6 one-change commits, want 2", s.Changes)
		}
		recreate := mustUpsert(t, b, taskRow("t1", "p1", "recreated on purpose"), sspclient.BaseVersion(0))
		rounds := syncQuiet(t, b)
		if len(rounds) < 2 {
			t.Fatalf("B caught up on the remaining commits with limitCommits 2 in %d rounds", len(rounds))
		}
		if o, _ := b.Outcome(recreate); o.Status != wire.PushApplied {
			t.Fatalf("recreate with baseVersion 0: %s, want applied", statusOf(o))
		}
		syncQuiet(t, a)
		server := e.serverRows("tasks")
		sameRows(t, "A vs server", clientRows(t, a, "tasks"), server)
		sameRows(t, "B vs server", clientRows(t, b, "tasks"), server)
		if server["t1"] != e.renderTask(t, 1, taskRow("t1", "p1", "recreated on purpose")) {
			t.Fatalf("t1 on the server: %s; want the recreated row at version 1", server["t1"])
		}
	})
}
