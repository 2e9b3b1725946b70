package syncgo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

func ratePull(t *testing.T, client string) []byte {
	return encodeRequest(t, &wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: client, SchemaVersion: 1}, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
}

// wantRateLimited checks a 429 sync.rate_limited refusal and returns its
// wait (retryAfterMs), checking that Retry-After is that wait in whole
// seconds, rounded up.
func wantRateLimited(t *testing.T, r rawResponse) time.Duration {
	t.Helper()
	wantJSONError(t, r, http.StatusTooManyRequests, syncerr.CodeRateLimited)
	pe, _ := syncerr.ParseJSON(r.body)
	if !pe.Entry().Retryable {
		t.Fatal("the refusal is not retryable")
	}
	var d struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	if err := json.Unmarshal(pe.Details, &d); err != nil || d.RetryAfterMs <= 0 {
		t.Fatalf("details %s: want a positive retryAfterMs", pe.Details)
	}
	want := strconv.FormatInt(max(1, (d.RetryAfterMs+999)/1000), 10)
	if got := r.header.Get("Retry-After"); got != want {
		t.Fatalf("Retry-After %q, want %q (retryAfterMs %d)", got, want, d.RetryAfterMs)
	}
	return time.Duration(d.RetryAfterMs) * time.Millisecond
}

// A per-actor rate limit refuses an actor's excess requests with 429,
// Retry-After and retryAfterMs, leaves another actor alone, and admits the
// actor again once the announced wait has passed.
func TestRateLimitPerActor(t *testing.T) {
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) {
		c.RateLimit = &syncgo.RateLimitConfig{PerActor: 0.5, PerActorBurst: 2}
	})
	for i := range 2 {
		if r, err := e.postAs("alice", ratePull(t, "a1")); err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d within the burst: %v %d %s", i, err, r.status, r.body)
		}
	}
	r, err := e.postAs("alice", ratePull(t, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	wait := wantRateLimited(t, r)
	if wait > 2*time.Second {
		t.Fatalf("retryAfterMs %v, want at most 2s at 0.5 requests/s", wait)
	}
	if r, err := e.postAs("bob", ratePull(t, "b1")); err != nil || r.status != http.StatusOK {
		t.Fatalf("another actor was limited: %v %d %s", err, r.status, r.body)
	}
	time.Sleep(wait + 20*time.Millisecond)
	if r, err := e.postAs("alice", ratePull(t, "a1")); err != nil || r.status != http.StatusOK {
		t.Fatalf("after the wait: %v %d %s", err, r.status, r.body)
	}
}

// A global rate limit counts every actor's requests together.
func TestRateLimitGlobal(t *testing.T) {
	e := newE2EEnv(t, e2eDrivers[0], func(c *syncgo.Config) {
		c.RateLimit = &syncgo.RateLimitConfig{Global: rate.Every(10 * time.Second), GlobalBurst: 2}
	})
	for _, a := range []string{"alice", "bob"} {
		if r, err := e.postAs(a, ratePull(t, a+"1")); err != nil || r.status != http.StatusOK {
			t.Fatalf("%s within the burst: %v %d %s", a, err, r.status, r.body)
		}
	}
	r, err := e.postAs("carol", ratePull(t, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if wait := wantRateLimited(t, r); wait <= 5*time.Second || wait > 10*time.Second {
		t.Fatalf("retryAfterMs %v, want up to 10s at one request per 10s", wait)
	}
}

// Socket rounds count under the actor's rate: the round over it is
// answered RESP_HEADER, ERROR sync.rate_limited (retryable), END.
func TestRateLimitSocketRounds(t *testing.T) {
	e := newRTEnv(t, func(c *syncgo.Config) {
		c.RateLimit = &syncgo.RateLimitConfig{PerActor: rate.Every(time.Minute), PerActorBurst: 2}
	})
	a := e.peer("alice", "a1")
	a.acquireEpoch() // one request
	s := e.dial("alice", "a1")
	s.hello()
	push := &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c1", rtTask{id: "t1", project: "p1", title: "x"})}}
	if seq := rtPushed(t, s.round(a, push)); seq != 1 {
		t.Fatalf("the round within the burst pushed at %d", seq)
	}
	push2 := &wire.Request{Commits: []*wire.PushCommit{e.pushCommit("a-c2", rtTask{id: "t2", project: "p1", title: "y"})}}
	m := s.round(a, push2)
	if got := rtFrameTypes(m); !slices.Equal(got, []string{"RESP_HEADER", "ERROR", "END"}) {
		t.Fatalf("a round over the rate: frames %v, want RESP_HEADER ERROR END", got)
	}
	if ef := m.Frames[1].(*wire.ErrorFrame); ef.Code != syncerr.CodeRateLimited || !ef.Retryable {
		t.Fatalf("a round over the rate: ERROR %s retryable=%v", ef.Code, ef.Retryable)
	}
}

// POST /operations counts under the actor's rate too: the request over it
// is an encoded sync.rate_limited error (HTTP 200, as REMOTE.md answers
// every refusal after the body) with Retry-After.
func TestRateLimitOperations(t *testing.T) {
	ops := syncgo.Operations{Queries: []syncgo.Query{{ID: "taskCount", SQL: "SELECT count(*) AS n FROM tasks",
		Columns: []syncgo.ResultColumn{{Name: "n", Type: wire.TypeInteger}}, MaxRows: 1,
		Authorize: func(context.Context, syncgo.Caller, syncgo.Params) (bool, error) { return true, nil }}}}
	e := newOpsEnv(t, openSQLite(t), ops, func(c *syncgo.Config) {
		c.RateLimit = &syncgo.RateLimitConfig{PerActor: rate.Every(time.Minute), PerActorBurst: 1}
	})
	if r := postOp(t, e, "alice", query("c1", "taskCount", nil)); r.status != http.StatusOK || r.code() != "" {
		t.Fatalf("within the burst: %d %v", r.status, r.msg)
	}
	hr, _ := http.NewRequest(http.MethodPost, e.url+"/operations", nil)
	body, _ := remotewire.Encode(nil, query("c1", "taskCount", nil))
	hr.Body = io.NopCloser(bytes.NewReader(body))
	hr.Header.Set("Content-Type", remotewire.ContentType)
	hr.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ra := resp.Header.Get("Retry-After"); ra != "60" {
		t.Fatalf("Retry-After %q, want 60 at one request a minute", ra)
	}
	if r := postOp(t, e, "alice", query("c1", "taskCount", nil)); r.status != http.StatusOK || r.code() != syncerr.CodeRateLimited || r.msg["retryable"] != true {
		t.Fatalf("over the rate: %d %v, want a retryable %s", r.status, r.msg, syncerr.CodeRateLimited)
	}
	if r := postOp(t, e, "bob", query("c2", "taskCount", nil)); r.status != http.StatusOK || r.code() != "" {
		t.Fatalf("another actor: %d %v", r.status, r.msg)
	}
}
