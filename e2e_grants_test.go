package syncgo_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// postAs sends a request body as an actor, without the testing.T (it
// runs on goroutines of its own).
func (e *e2eEnv) postAs(actor string, body []byte) (rawResponse, error) {
	req, err := http.NewRequest(http.MethodPost, e.url+"/sync", bytes.NewReader(body))
	if err != nil {
		return rawResponse{}, err
	}
	req.Header.Set("Content-Type", sspclient.ContentType)
	req.Header.Set("Authorization", "Bearer "+actor)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rawResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// Two actors push with the same fresh clientId and the same
// clientCommitId at the same moment (finding 3 of issue 15): the clientId
// is bound to exactly one of them, the other is refused with
// sync.invalid_client_id before any push result is read, and no actor ever
// gets the other's cached result while its own write is dropped.
func TestE2EClientIDCaptureRace(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("seed", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		actors := []string{"alice", "bob"}
		const iterations = 40
		captures, bothApplied := 0, 0
		for i := range iterations {
			clientID := fmt.Sprintf("shared-device-%d", i)
			bodies := make([][]byte, len(actors))
			for j, actor := range actors {
				op := e.upsertOp(t, taskRow(fmt.Sprintf("%s-%d", actor, i), "p1", actor))
				bodies[j] = encodeRequest(t, &wire.Request{Version: 3,
					Header:  &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
					Commits: []*wire.PushCommit{{ClientCommitID: "commit-1", Operations: []wire.Operation{op}}}})
			}
			resps := make([]rawResponse, len(actors))
			errs := make([]error, len(actors))
			var wg sync.WaitGroup
			start := make(chan struct{})
			for j, actor := range actors {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resps[j], errs[j] = e.postAs(actor, bodies[j])
				}()
			}
			close(start)
			wg.Wait()
			rows := e.serverRows("tasks")
			applied := 0
			for j, actor := range actors {
				if errs[j] != nil {
					t.Fatalf("iteration %d, %s: %v", i, actor, errs[j])
				}
				r := resps[j]
				if r.status != http.StatusOK {
					wantJSONError(t, r, http.StatusBadRequest, syncerr.CodeInvalidClientID)
					continue
				}
				m := decodeResponse(t, r)
				var pr *wire.PushResult
				for _, f := range m.Frames {
					if p, ok := f.(*wire.PushResult); ok {
						pr = p
					}
				}
				_, own := rows[fmt.Sprintf("%s-%d", actor, i)]
				switch {
				case pr == nil:
					t.Fatalf("iteration %d, %s: 200 without a PUSH_RESULT", i, actor)
				case pr.Status != wire.PushApplied || !own:
					captures++
					t.Errorf("iteration %d, %s: PUSH_RESULT %v (seq %d), own row stored: %v; want applied and stored",
						i, actor, pr.Status, pr.CommitSeq, own)
				default:
					applied++
				}
			}
			if applied > 1 {
				bothApplied++
			}
			if applied == 0 && captures == 0 {
				t.Errorf("iteration %d: neither actor applied", i)
			}
		}
		if captures != 0 || bothApplied != 0 {
			t.Fatalf("%d of %d races captured a result, %d bound one clientId to two actors; want 0", captures, iterations, bothApplied)
		}
	})
}

// pushRaw pushes one commit as an actor and returns its PUSH_RESULT.
func (e *e2eEnv) pushRaw(t *testing.T, actor, clientID, commitID string, ops ...wire.Operation) *wire.PushResult {
	t.Helper()
	epoch := e.partitionState().LogEpoch
	r, err := e.postAs(actor, encodeRequest(t, &wire.Request{Version: 3,
		Header:  &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		Commits: []*wire.PushCommit{{ClientCommitID: commitID, Operations: ops}}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range decodeResponse(t, r).Frames {
		if pr, ok := f.(*wire.PushResult); ok {
			return pr
		}
	}
	t.Fatalf("push %s: no PUSH_RESULT", commitID)
	return nil
}

func deleteOp(rowID string) wire.Operation {
	return wire.Operation{Table: "tasks", RowID: rowID, Op: wire.OpDelete}
}

// A refused or no-op operation never appends a commit (finding 9 of issue
// 15). Deleting an absent row is applied (§6.2, §3.4 step 2: there is no
// authorization row) but appends nothing, since a commit holds one or more
// changes (§2.1): its commitSeq is the log position it applied at, and a
// retry replays it as cached. Deleting a present row outside the actor's
// scopes is sync.forbidden (the spec's accepted disclosure) and appends
// nothing either. A commit mixing a no-op with a real change appends one
// commit carrying only the real change.
func TestE2ENoEmptyCommits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		e.allow("alice", map[string][]string{"project_id": {"p1"}})
		bob := e.client("bob", sspclient.Options{})
		syncQuiet(t, bob)
		mustUpsert(t, bob, taskRow("secret", "p2", "bob's"))
		syncQuiet(t, bob)
		base := e.partitionState().MaxCommitSeq
		if base != 1 {
			t.Fatalf("MaxCommitSeq %d after one commit", base)
		}

		// A present row outside alice's scopes: forbidden, nothing appended.
		pr := e.pushRaw(t, "alice", "alice-dev", "del-secret", deleteOp("secret"))
		if pr.Status != wire.PushRejected || len(pr.Results) != 1 || pr.Results[0].Code != syncerr.CodeForbidden {
			t.Fatalf("delete of bob's row: %v %+v; want rejected sync.forbidden", pr.Status, pr.Results)
		}
		// An absent row: applied at the current log position, nothing
		// appended; a retry is cached with the same commitSeq.
		pr = e.pushRaw(t, "alice", "alice-dev", "del-absent", deleteOp("absent"))
		if pr.Status != wire.PushApplied || pr.CommitSeq != base || len(pr.Results) != 1 || pr.Results[0].Status != wire.OpApplied {
			t.Fatalf("delete of an absent row: %v seq %d %+v; want applied at seq %d", pr.Status, pr.CommitSeq, pr.Results, base)
		}
		if got := e.partitionState().MaxCommitSeq; got != base {
			t.Fatalf("MaxCommitSeq %d after a refused and a no-op commit; want %d (no commit appended)", got, base)
		}
		pr = e.pushRaw(t, "alice", "alice-dev", "del-absent", deleteOp("absent"))
		if pr.Status != wire.PushCached || pr.CommitSeq != base {
			t.Fatalf("retry of the no-op commit: %v seq %d; want cached at %d", pr.Status, pr.CommitSeq, base)
		}
		// Two no-ops in one commit, then a no-op beside a real change.
		pr = e.pushRaw(t, "alice", "alice-dev", "del-two", deleteOp("absent"), deleteOp("absent-2"))
		if pr.Status != wire.PushApplied || pr.CommitSeq != base {
			t.Fatalf("two absent deletes: %v seq %d; want applied at %d", pr.Status, pr.CommitSeq, base)
		}
		pr = e.pushRaw(t, "alice", "alice-dev", "mixed", deleteOp("absent"), e.upsertOp(t, taskRow("a1", "p1", "alice's")))
		if pr.Status != wire.PushApplied || pr.CommitSeq != base+1 {
			t.Fatalf("no-op beside an upsert: %v seq %d; want applied at %d", pr.Status, pr.CommitSeq, base+1)
		}
		commits, err := e.store.ReadCommits(t.Context(), e2ePartition, 0, base+10, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(commits) != 2 {
			t.Fatalf("log holds %d commits; want 2 (bob's and the mixed one)", len(commits))
		}
		for _, c := range commits {
			if len(c.Changes) != 1 {
				t.Errorf("commit %d holds %d changes; want 1 (no empty commit, no change for an absent delete)", c.Seq, len(c.Changes))
			}
		}
		// The no-op commit after the mixed one answers the newer position.
		pr = e.pushRaw(t, "alice", "alice-dev", "del-after", deleteOp("absent"))
		if pr.Status != wire.PushApplied || pr.CommitSeq != base+1 {
			t.Fatalf("absent delete after the mixed commit: %v seq %d; want applied at %d", pr.Status, pr.CommitSeq, base+1)
		}
	})
}

// A journal record answers only the actor that made it: after an epoch
// rotation forgot the client records, another actor can bind the same
// clientId, but a commit id the former actor used is refused with
// sync.invalid_client_id instead of replaying the former actor's result.
func TestE2EPushResultKeyedByActor(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("seed", sspclient.Options{})
		syncQuiet(t, seed)
		pr := e.pushRaw(t, "alice", "device", "c1", e.upsertOp(t, taskRow("a1", "p1", "alice's")))
		if pr.Status != wire.PushApplied {
			t.Fatalf("alice's push: %v", pr.Status)
		}
		if err := e.store.RotateLogEpoch(context.Background(), e2ePartition, "epoch-2", time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		epoch := "epoch-2"
		r, err := e.postAs("bob", encodeRequest(t, &wire.Request{Version: 3,
			Header:  &wire.ReqHeader{ClientID: "device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{e.upsertOp(t, taskRow("b1", "p1", "bob's"))}}}}))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK {
			wantJSONError(t, r, http.StatusBadRequest, syncerr.CodeInvalidClientID)
			if rows := e.serverRows("tasks"); rows["b1"] != "" {
				t.Fatal("bob's refused write was stored")
			}
			return
		}
		var code string
		for _, f := range decodeResponse(t, r).Frames {
			switch f := f.(type) {
			case *wire.PushResult:
				t.Fatalf("bob got a PUSH_RESULT %v seq %d for alice's commit id", f.Status, f.CommitSeq)
			case *wire.ErrorFrame:
				code = f.Code
			}
		}
		if code != syncerr.CodeInvalidClientID {
			t.Fatalf("bob's replay of alice's commit id: error %q; want %s", code, syncerr.CodeInvalidClientID)
		}
	})
}
