package syncgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// wireRetryable reads the retryable flag as it is on the wire in a §10.1
// JSON error body (syncerr.ParseJSON keeps the code only).
func wireRetryable(t *testing.T, b []byte) bool {
	t.Helper()
	var in struct {
		Retryable *bool `json:"retryable"`
	}
	if err := json.Unmarshal(b, &in); err != nil || in.Retryable == nil {
		t.Fatalf("error body %s has no retryable flag", b)
	}
	return *in.Retryable
}

// oldHeader is the request header of a client of wire version v: version
// 1 carries no log epoch.
func oldHeader(v uint16, clientID string, epoch string) *wire.ReqHeader {
	h := &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1}
	if v >= wire.Version2 {
		h.LogEpoch = &epoch
	}
	return h
}

// sync.internal_error is not in the closed catalog of wire versions 1 and
// 2, and is sent to their clients as it is: the clients of that line take
// the retryable flag from the error body or the ERROR frame, not from a
// table of codes (the 0.15.48 TypeScript client: web-client/src/http.ts
// throwHttpError, client.ts #processResponse and #runSync's catch), so a
// server failure stays a failure they retry. This pins what they read:
// the code, the HTTP status and retryable = true, for a push refused on a
// full storage (503) and for a pull whose storage read failed (500, or an
// in-band ERROR frame), over HTTP, for versions 1, 2 and 3 alike.
func TestE2EOldWireInternalErrorRetryable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var full *fullStore
		var faulty *faultyStore
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			full = &fullStore{barrierStore: c.Store.(barrierStore)}
			faulty = &faultyStore{Store: full}
			c.Store = faulty
		})
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "s", "p1", "p2")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		mustUpsert(t, seed, taskRow("t2", "p2", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch

		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			id := fmt.Sprintf("old-v%d", v)

			full.full.Store(true)
			r := e.post(t, body(encodeRequest(t, &wire.Request{Version: v, Header: oldHeader(v, id, epoch),
				Commits: []*wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{e.upsertOp(t, taskRow("n"+id, "p1", "full"))}}}})), nil)
			full.full.Store(false)
			wantJSONError(t, r, http.StatusServiceUnavailable, syncerr.CodeInternalError)
			if !wireRetryable(t, r.body) {
				t.Fatalf("v%d: a push on a full storage answered %s; want retryable", v, r.body)
			}

			p2 := "p2"
			faulty.failScope.Store(&p2)
			r = e.post(t, body(encodeRequest(t, &wire.Request{Version: v, Header: oldHeader(v, id, epoch),
				Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
				Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: -1,
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p2"}}}}}})), nil)
			faulty.failScope.Store(nil)
			if r.status != http.StatusOK {
				wantJSONError(t, r, http.StatusInternalServerError, syncerr.CodeInternalError)
				if !wireRetryable(t, r.body) {
					t.Fatalf("v%d: a pull whose read failed answered %s; want retryable", v, r.body)
				}
				continue
			}
			m := decodeResponse(t, r)
			ef, ok := m.Frames[len(m.Frames)-1].(*wire.ErrorFrame)
			if m.Version != v || !ok || ef.Code != syncerr.CodeInternalError || !ef.Retryable || ef.RecommendedAction != "retryLater" {
				t.Fatalf("v%d: a pull whose read failed answered version %d, last frame %+v; want a retryable %s ERROR", v, m.Version, m.Frames[len(m.Frames)-1], syncerr.CodeInternalError)
			}
		}
	})
}

// The same over the socket (§8.7 failures): a version 1 or 2 socket round
// whose storage read fails is answered in its own version with an ERROR
// frame of sync.internal_error, retryable, and the socket stays open for
// the next round, which succeeds.
func TestRealtimeOldWireInternalErrorRetryable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		faulty := &faultyStore{Store: d.open(t)}
		e := newGrantEnv(t, faulty, &rtGrants{})
		bob := e.peer("bob", "b1")
		for _, v := range []uint16{wire.Version1, wire.Version2} {
			// A project per version: a bootstrap that succeeded leaves a
			// segment the next one would reuse without reading rows.
			id, project := fmt.Sprintf("old-v%d", v), fmt.Sprintf("p%d", 10+v)
			bob.push("c"+id, rtTask{id: "t" + id, project: project})
			a := e.peer("alice", id)
			a.acquireEpoch()
			s := e.dial("alice", id)
			s.hello()
			req := &wire.Request{Version: v, Header: oldHeader(v, id, *a.epoch),
				Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: []*wire.Subscription{rtSub("s", -1, project)}}
			faulty.failScope.Store(&project)
			m := s.round(a, req)
			faulty.failScope.Store(nil)
			ef, ok := m.Frames[len(m.Frames)-1].(*wire.ErrorFrame)
			if m.Version != v || !ok || ef.Code != syncerr.CodeInternalError || !ef.Retryable || ef.RecommendedAction != "retryLater" {
				t.Fatalf("v%d: a socket round whose read failed answered version %d, frames %v; want a retryable %s ERROR", v, m.Version, rtFrameTypes(m), syncerr.CodeInternalError)
			}
			req.Header = oldHeader(v, id, *a.epoch)
			m = s.round(a, req)
			if _, failed := m.Frames[len(m.Frames)-1].(*wire.ErrorFrame); failed || m.Version != v {
				t.Fatalf("v%d: the round after the failure answered version %d, frames %v", v, m.Version, rtFrameTypes(m))
			}
			_ = s.nc.Close()
		}
	})
}

// sync.schema_not_ready, also outside the version 1 and 2 catalog, is
// sent to their clients as it is, for the same reason: a pull of a server
// whose serve gate is closed (a declared checkpoint not activated) is HTTP
// 503 with retryable = true in every wire version, so that an old client
// retries once the backfill is done, and served again after it.
func TestMigrationBarrierOldWireVersions(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		_, v2 := windowSchemas(t)
		_, url, err := e.server(v2)
		if err != nil {
			t.Fatal(err)
		}
		status, b := post(t, url, pullReq(nil, 2))
		m, err := wire.DecodeMessage(b, wire.DecoderOptions{})
		if status != http.StatusOK || err != nil {
			t.Fatalf("acquire epoch: %d %v", status, err)
		}
		epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
		old := func(v uint16) *wire.Request {
			req := pullReq(nil, 2)
			req.Version, req.Header = v, oldHeader(v, "c", epoch)
			req.Header.SchemaVersion = 2
			return req
		}
		if _, err := e.open().(store.Barrier).DeclareCheckpoint(context.Background(),
			store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1); err != nil {
			t.Fatal(err)
		}
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			status, b := post(t, url, old(v))
			wantNotReady(t, status, b, "projection")
			if !wireRetryable(t, b) {
				t.Fatalf("v%d: a pull with the serve gate closed answered %s; want retryable", v, b)
			}
		}
		if _, err := syncgo.RunBackfill(context.Background(), e.open(), syncgo.Backfill{Partition: "p", Name: "proj", Sources: []string{"tasks"}}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			status, b := post(t, url, old(v))
			m, err := wire.DecodeMessage(b, wire.DecoderOptions{Kind: wire.KindResponse})
			if status != http.StatusOK || err != nil || m.Version != v {
				t.Fatalf("v%d: after the backfill: %d %v (%s)", v, status, err, b)
			}
		}
	})
}
