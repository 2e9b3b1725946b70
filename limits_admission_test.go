package syncgo_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Admission control (issue 15, finding 5): with every slot taken and no
// queue room, a request is refused at once with sync.rate_limited, HTTP
// 503 and Retry-After, and writes nothing; once the slot frees, the same
// request is served.
func TestAdmissionSheds(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		entered, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.MaxConcurrentRequests, c.MaxQueuedRequests = 1, -1
			resolve := c.ResolveScopes
			c.ResolveScopes = func(ctx context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
				if q.ClientID == "slow" {
					once.Do(func() { close(entered) })
					<-gate
				}
				return resolve(ctx, q)
			}
		})
		var release sync.Once
		open := func() { release.Do(func() { close(gate) }) }
		t.Cleanup(open) // before the server's cleanup: a failing test must not leave the slow request hanging
		e.allow("alice", map[string][]string{"project_id": {"*"}})
		acq := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
			Header: &wire.ReqHeader{ClientID: "warm", SchemaVersion: 1}, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})), nil))
		epoch := acq.Frames[0].(*wire.RespHeader).LogEpoch

		slow := make(chan rawResponse, 1)
		go func() { slow <- e.post(t, body(encodeRequest(t, subsRequest("slow", epoch, 1))), nil) }()
		select {
		case <-entered:
		case <-time.After(rtWait):
			t.Fatal("the slow request never reached the resolver")
		}

		push := encodeRequest(t, &wire.Request{Version: wire.Version3,
			Header:  &wire.ReqHeader{ClientID: "x", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "c1", Operations: []wire.Operation{e.upsertOp(t, taskRow("t1", "p1", "shed"))}}}})
		before := e.snapshot(t, "x", "c1")
		r := e.post(t, body(push), nil)
		wantJSONError(t, r, http.StatusServiceUnavailable, syncerr.CodeRateLimited)
		if r.header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After on a refusal")
		}
		if pe, _ := syncerr.ParseJSON(r.body); !pe.Entry().Retryable {
			t.Fatal("the refusal is not retryable")
		}
		if after := e.snapshot(t, "x", "c1"); !after.equal(before) {
			t.Fatalf("a refused push changed the database: %+v -> %+v", before, after)
		}

		open()
		if r := <-slow; r.status != http.StatusOK {
			t.Fatalf("the admitted request: %d %s", r.status, r.body)
		}
		m := decodeResponse(t, e.post(t, body(push), nil))
		if got := e.serverRows("tasks"); len(got) != 1 {
			t.Fatalf("after the slot freed the push was not applied: %v (%d frames)", got, len(m.Frames))
		}
	})
}
