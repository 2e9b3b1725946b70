package syncgo_test

import (
	"net/http"
	"runtime"
	"strconv"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// subsRequest is a pull of n subscriptions of client cid.
func subsRequest(cid, epoch string, n int) *wire.Request {
	subs := make([]*wire.Subscription, n)
	for i := range subs {
		subs[i] = &wire.Subscription{ID: "s" + strconv.Itoa(i), Table: "tasks", Cursor: -1,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p" + strconv.Itoa(i)}}}}
	}
	return &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: &epoch},
		Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: subs}
}

// The subscriptions of a request are capped (issue 15, finding 7): over
// the cap the request is refused as a whole with sync.invalid_subscription
// and nothing is recorded; at the cap it is served.
func TestSubscriptionCap(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		for _, tc := range []struct {
			name  string
			limit int // 0: the default
			cap   int
		}{{"default", 0, 1000}, {"configured", 40, 40}} {
			t.Run(tc.name, func(t *testing.T) {
				e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Limits.MaxSubscriptionsPerRequest = tc.limit })
				e.allow("alice", map[string][]string{"project_id": {"*"}})
				acq := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: wire.Version3,
					Header: &wire.ReqHeader{ClientID: "warm", SchemaVersion: 1}, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})), nil))
				epoch := acq.Frames[0].(*wire.RespHeader).LogEpoch

				before := e.snapshot(t, "many", "")
				r := e.post(t, body(encodeRequest(t, subsRequest("many", epoch, tc.cap+1))), nil)
				wantJSONError(t, r, http.StatusBadRequest, syncerr.CodeInvalidSubscription)
				if after := e.snapshot(t, "many", ""); !after.equal(before) {
					t.Fatalf("a refused request changed the database: %+v -> %+v", before, after)
				}
				// At the cap it is served, and each (empty) bootstrap section
				// costs little: the whole request allocates (client side
				// included) well under 40 KiB per subscription.
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				m := decodeResponse(t, e.post(t, body(encodeRequest(t, subsRequest("many", epoch, tc.cap))), nil))
				runtime.ReadMemStats(&m1)
				if got := len(rtCursors(t, m)); got != tc.cap {
					t.Fatalf("%d sections answered, want %d", got, tc.cap)
				}
				per := (m1.TotalAlloc - m0.TotalAlloc) / uint64(tc.cap)
				t.Logf("%d subscriptions: %d KiB allocated per subscription", tc.cap, per>>10)
				// Only the default cap amortizes the request's fixed costs
				// (and other tests' allocations meanwhile) enough to judge.
				if tc.limit == 0 && per > 40<<10 {
					t.Fatalf("%d B allocated per subscription", per)
				}
			})
		}
	})
}
