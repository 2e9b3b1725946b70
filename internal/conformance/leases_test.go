package conformance

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/wire"
)

// createWithLeases makes an instance of testSchema with leases of ttlMs.
func (h *harness) createWithLeases(ttlMs int64) (id, mount string) {
	h.t.Helper()
	var out struct{ ID, Mount string }
	body := map[string]any{"schema": json.RawMessage(testSchema), "partition": "part-1", "nowMs": startMs,
		"leases": map[string]any{"ttlMs": ttlMs}}
	if code := h.do("POST", "/__conformance/instances", body, &out); code != http.StatusOK || out.ID == "" {
		h.t.Fatalf("create instance: %d %+v", code, out)
	}
	return out.ID, out.Mount
}

// leaseOf returns the LEASE frame of a response, or nil.
func leaseOf(frames []wire.Frame) *wire.Lease {
	for _, f := range frames {
		if l, ok := f.(*wire.Lease); ok {
			return l
		}
	}
	return nil
}

// Leases over the control surface: issued and slid on live rounds, served
// during an outage until they expire, refused once revoked, and a fresh id
// after recovery.
func TestLeasesLifecycle(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, h *harness) {
		const ttl = 900_000
		id, mount := h.createWithLeases(ttl)
		h.call(id, nil, "setAllowedScopes", "actor-a", map[string][]string{"project_id": {"p1"}})
		a := h.client(mount, "actor-a", "client-a")
		a.acquireEpoch()
		pull := &wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}, Subscriptions: []*wire.Subscription{{ID: "tasks",
			Table: "tasks", Cursor: -1, Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}}
		l1 := leaseOf(a.roundTrip(pull))
		if l1 == nil || l1.ExpiresAtMs != startMs+ttl {
			t.Fatalf("first lease %+v, want one expiring at %d", l1, startMs+ttl)
		}
		h.call(id, nil, "advanceClock", 60_000)
		l2 := leaseOf(a.roundTrip(pull))
		if l2 == nil || l2.LeaseID != l1.LeaseID || l2.ExpiresAtMs != startMs+60_000+ttl {
			t.Fatalf("refreshed lease %+v, want %s sliding", l2, l1.LeaseID)
		}

		h.call(id, nil, "setResolverOutage", true)
		if pr := a.push("c1", task("t1", "p1", "offline", nil)); pr.Status != wire.PushApplied {
			t.Fatalf("push on the lease: %+v", pr)
		}
		frames := a.roundTrip(pull)
		if leaseOf(frames) != nil {
			t.Error("a lease-authorized round refreshed the lease")
		}
		h.call(id, nil, "advanceClock", ttl)
		if code, body := a.roundTripStatus(pull); code != http.StatusUnauthorized && code != http.StatusForbidden || !jsonHasCode(body, "sync.auth_lease_required") {
			t.Fatalf("round on an expired lease: %d %s", code, body)
		}
		h.call(id, nil, "setResolverOutage", false)
		l3 := leaseOf(a.roundTrip(pull))
		if l3 == nil || l3.LeaseID != l1.LeaseID {
			t.Fatalf("lease after recovery %+v", l3)
		}
		h.call(id, nil, "revokeLease", l3.LeaseID)
		h.call(id, nil, "setResolverOutage", true)
		if code, body := a.roundTripStatus(pull); !jsonHasCode(body, "sync.auth_lease_revoked") {
			t.Fatalf("round on a revoked lease: %d %s", code, body)
		}
		h.call(id, nil, "setResolverOutage", false)
		l4 := leaseOf(a.roundTrip(pull))
		if l4 == nil || l4.LeaseID == l3.LeaseID {
			t.Fatalf("lease after revocation and recovery %+v, want a fresh id", l4)
		}
	})
}

func jsonHasCode(body []byte, code string) bool {
	var e struct{ Code string }
	return json.Unmarshal(body, &e) == nil && e.Code == code
}

// roundTripStatus sends req and returns the status and the raw body,
// whatever they are.
func (c *sspClient) roundTripStatus(req *wire.Request) (int, []byte) {
	c.t.Helper()
	req.Version = wire.Version3
	req.Header = &wire.ReqHeader{ClientID: c.clientID, SchemaVersion: 1, LogEpoch: c.epoch}
	body, err := req.MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	hreq, err := http.NewRequest("POST", c.url+"/sync", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hreq.Header.Set("Authorization", "Bearer "+c.actor)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
