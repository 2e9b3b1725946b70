package sspclient_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// A SEGMENT_REF is downloaded with the canonical requested scopes in
// X-Syncular-Scopes and applied after its hash checks out (§5.1, §5.5); a
// segment whose bytes do not hash to its id fails the round and persists
// nothing.
func TestSegmentRefVerified(t *testing.T) {
	s := fakeSchema(t)
	good := segmentOf(t, s, note(t, s, "n1", "p1", "one"), note(t, s, "n2", "p1", "two"))
	tampered := segmentOf(t, s, note(t, s, "n1", "p1", "tampered"), note(t, s, "n2", "p1", "two"))
	var refID atomic.Pointer[string]
	f := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		return []wire.Frame{&wire.RespHeader{LogEpoch: "e1"},
			&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1"), Bootstrap: true},
			&wire.SegmentRef{SegmentID: *refID.Load(), MediaType: wire.MediaRows, Table: "notes", ByteLength: int64(len(good)),
				RowCount: 2, AsOfCommitSeq: 3, ScopeDigest: "d"},
			&wire.SubEnd{NextCursor: 3}}
	})
	// A tampered segment: stored under the id of the good bytes.
	id := f.publish(tampered, good)
	refID.Store(&id)
	c, _ := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{})
	_ = c.Subscribe("s", "notes", map[string][]string{"project": {"p1", "p0"}})
	if _, err := c.Sync(context.Background()); err == nil {
		t.Fatal("a segment with the wrong hash was accepted")
	}
	if st, _ := c.Subscription("s"); st.Cursor != -1 || len(c.Rows("notes")) != 0 {
		t.Fatalf("after the mismatch: cursor %d, %d rows; want nothing applied", st.Cursor, len(c.Rows("notes")))
	}
	f.mu.Lock()
	h := f.scopesHeader
	f.mu.Unlock()
	if h != `{"project":["p0","p1"]}` {
		t.Fatalf("X-Syncular-Scopes %q; want the canonical requested scopes", h)
	}

	f.publish(good)
	res, err := c.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sec := res.Sections[0]; !sec.Complete || sec.Rows != 2 || len(sec.Refs) != 1 {
		t.Fatalf("section %+v; want 2 rows from one reference", sec)
	}
	if r, ok := c.Row("notes", "n1"); !ok || r.Version != 1 {
		t.Fatalf("n1 = %+v, %v", r, ok)
	}
}

// Revocation purges the rows inside the last effective scopes echoed while
// active, not the requested ones (§3.3): a narrowing echo purges nothing;
// the revocation after it purges only the narrowed scope.
func TestRevocationPurgesLastEffectiveScopes(t *testing.T) {
	s := fakeSchema(t)
	round := 0
	f := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		round++
		h := &wire.RespHeader{LogEpoch: "e1"}
		if len(req.Subscriptions) == 0 {
			return []wire.Frame{h}
		}
		switch round {
		case 1:
			return []wire.Frame{h,
				&wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1", "p2"), Bootstrap: true},
				&wire.SegmentInline{Payload: segmentOf(t, s, note(t, s, "n1", "p1", ""), note(t, s, "n2", "p2", ""))},
				&wire.SubEnd{NextCursor: 5}}
		case 2:
			return []wire.Frame{h, &wire.SubStart{ID: "s", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1")},
				&wire.SubEnd{NextCursor: 5}}
		}
		return []wire.Frame{h, &wire.SubStart{ID: "s", Status: wire.SubRevoked, ReasonCode: "sync.scope_revoked", EffectiveScopes: wire.ScopeMap{}},
			&wire.SubEnd{NextCursor: 5}}
	})
	c, _ := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{})
	_ = c.Subscribe("s", "notes", map[string][]string{"project": {"p1", "p2"}})
	for i := range 3 {
		if _, err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i == 1 && len(c.Rows("notes")) != 2 {
			t.Fatal("a narrowing echo purged rows")
		}
	}
	rows := c.Rows("notes")
	if _, ok := rows["n2"]; len(rows) != 1 || !ok {
		t.Fatalf("after the revocation the client holds %v; want n2 only (outside the last effective scopes)", rows)
	}
	if st, _ := c.Subscription("s"); st.Status != wire.SubRevoked {
		t.Fatalf("status %s, want revoked", st.Status)
	}
	_, before := f.request(0)
	if _, err := c.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if req, _ := f.request(before); len(req.Subscriptions) != 0 {
		t.Fatal("the revoked subscription was pulled again")
	}
}
