package syncgo_test

import (
	"context"
	"net/http"
	"slices"
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

// Socket rounds (§8.7) are admitted under the same cap as POST /sync: with
// every slot taken and no queue room, a round is answered RESP_HEADER,
// ERROR sync.rate_limited (retryable), END, writes nothing, and the socket
// stays usable; once the slot frees, the same round is served.
func TestAdmissionShedsSocketRounds(t *testing.T) {
	entered := make(chan struct{})
	var once sync.Once
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.MaxConcurrentRequests, c.MaxQueuedRequests = 1, -1
		resolve := c.ResolveScopes
		c.ResolveScopes = func(ctx context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
			if q.ClientID == "slow" {
				once.Do(func() { close(entered) })
			}
			return resolve(ctx, q)
		}
	})
	a := e.peer("alice", "a1")
	a.acquireEpoch()
	s := e.dial("alice", "a1")
	s.hello()

	open := e.gate("slow")
	t.Cleanup(open)
	slow := e.peer("bob", "slow")
	slow.acquireEpoch()
	done := make(chan error, 1)
	go func() {
		_, err := slow.tryPost(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(rtWait):
		t.Fatal("the slow request never reached the resolver")
	}

	push := &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c1", rtTask{id: "t1", project: "p1", title: "shed"})}}
	m := s.round(a, push)
	if got := rtFrameTypes(m); !slices.Equal(got, []string{"RESP_HEADER", "ERROR", "END"}) {
		t.Fatalf("a round over the cap: frames %v, want RESP_HEADER ERROR END", got)
	}
	if ef := m.Frames[1].(*wire.ErrorFrame); ef.Code != syncerr.CodeRateLimited || !ef.Retryable {
		t.Fatalf("a round over the cap: ERROR %s retryable=%v, want a retryable %s", ef.Code, ef.Retryable, syncerr.CodeRateLimited)
	}

	open()
	if err := <-done; err != nil {
		t.Fatalf("the admitted request: %v", err)
	}
	if got := a.pull(rtSub("s1", -1, "p1"))["s1"]; got != 0 {
		t.Fatalf("the refused round wrote: the log head is %d", got)
	}
	seq := rtPushed(t, s.round(a, push))
	if seq != 1 {
		t.Fatalf("after the slot freed the round's push is at %d, want 1", seq)
	}
}
