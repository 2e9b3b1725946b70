package sspclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// echoPushes answers every commit of a request applied, with sequences
// from 1, after the header.
func echoPushes(req *wire.Request, epoch string) []wire.Frame {
	out := []wire.Frame{&wire.RespHeader{LogEpoch: epoch}}
	for i, c := range req.Commits {
		out = append(out, &wire.PushResult{ClientCommitID: c.ClientCommitID, Status: wire.PushApplied,
			CommitSeq: int64(i + 1), Results: []wire.OpResult{{OpIndex: 0, Status: wire.OpApplied}}})
	}
	return out
}

// The epoch is acquired by a round without commits (§2.1); the outbox
// waits for the next round, which carries the epoch. Wire version 1 has
// no epoch and pushes at once.
func TestEpochAcquisitionWithholdsOutbox(t *testing.T) {
	f := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Version >= wire.Version2 && req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		return echoPushes(req, map[bool]string{true: "e1"}[req.Version >= wire.Version2])
	})
	s := fakeSchema(t)
	for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
		c, err := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{WireVersion: v})
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.Upsert("notes", map[string]any{"id": "n1", "project": "p1", "body": "x"})
		if err != nil {
			t.Fatal(err)
		}
		_, before := f.request(0)
		res, err := c.Sync(context.Background())
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		var reqs []*wire.Request
		for i := before; ; i++ {
			r, _ := f.request(i)
			if r == nil {
				break
			}
			reqs = append(reqs, r)
		}
		if v == wire.Version1 {
			if len(reqs) != 1 || len(reqs[0].Commits) != 1 {
				t.Fatalf("v1: %d requests; want one carrying the commit", len(reqs))
			}
		} else {
			if len(reqs) != 2 || reqs[0].Header.LogEpoch != nil || len(reqs[0].Commits) != 0 {
				t.Fatalf("v%d: %d requests, first with epoch %v and %d commits; want an empty acquisition first", v, len(reqs), reqs[0].Header.LogEpoch, len(reqs[0].Commits))
			}
			if ep := reqs[1].Header.LogEpoch; ep == nil || *ep != "e1" || len(reqs[1].Commits) != 1 {
				t.Fatalf("v%d: the second request carries epoch %v and %d commits; want e1 and the commit", v, ep, len(reqs[1].Commits))
			}
		}
		if o, ok := c.Outcome(id); !ok || o.Status != wire.PushApplied || c.Pending() != 0 || len(res.Pushed) != 1 {
			t.Fatalf("v%d: outcome %+v, %d pending", v, o, c.Pending())
		}
	}
}

// Wire version 3 pushes sparse rows of the written columns; versions 1
// and 2 push full rows completed from the local row (§2.4, §6.1).
func TestPayloadsByWireVersion(t *testing.T) {
	s := fakeSchema(t)
	tbl, _ := s.Table("notes")
	f := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil && req.Version >= wire.Version2 {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		out := echoPushes(req, map[bool]string{true: "e1"}[req.Version >= wire.Version2])
		for _, sub := range req.Subscriptions {
			out = append(out, &wire.SubStart{ID: sub.ID, Status: wire.SubActive, EffectiveScopes: sub.Scopes},
				&wire.Commit{CommitSeq: 1, ActorID: "a", Tables: []string{"notes"}, Changes: []wire.Change{{RowID: "n1",
					Op: wire.OpUpsert, RowVersion: 4, Scopes: wire.StoredScopes{{Key: "project", Value: "p1"}},
					Row: note(t, s, "n1", "p1", "stored")}}},
				&wire.SubEnd{NextCursor: 1})
		}
		return out
	})
	for _, v := range []uint16{wire.Version2, wire.Version3} {
		c, _ := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{WireVersion: v})
		if err := c.Subscribe("s", "notes", map[string][]string{"project": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Upsert("notes", map[string]any{"id": "n1", "body": "edited"}, sspclient.Versioned()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		op := f.lastRequest().Commits[0].Operations[0]
		if op.BaseVersion == nil || *op.BaseVersion != 4 {
			t.Fatalf("v%d: baseVersion %v, want the local row's 4", v, op.BaseVersion)
		}
		if v == wire.Version3 {
			sr, err := tbl.RowCodec().DecodeSparse(op.Payload)
			if err != nil || !sr.Present[0] || sr.Present[1] || !sr.Present[2] || sr.Values[2].Str != "edited" {
				t.Fatalf("v3 payload %+v, %v; want id and body only", sr, err)
			}
			continue
		}
		vals, err := tbl.RowCodec().DecodeRow(op.Payload)
		if err != nil || vals[1].Str != "p1" || vals[2].Str != "edited" {
			t.Fatalf("v2 payload %+v, %v; want the full row with the local project", vals, err)
		}
	}
}

// The abort rule (§1.4 rule 5): a section closed by SUB_END stays
// persisted; the section open at an ERROR frame or a truncation keeps the
// frames and blocks it applied but persists no cursor or token.
func TestAbortRule(t *testing.T) {
	s := fakeSchema(t)
	seg := segmentOf(t, s, note(t, s, "n2", "p2", "from a segment"))
	var tail []wire.Frame
	f := newFakeServer(t, func(req *wire.Request) []wire.Frame {
		if req.Header.LogEpoch == nil {
			return []wire.Frame{&wire.RespHeader{LogEpoch: "e1", ResetRequired: true}}
		}
		return append([]wire.Frame{&wire.RespHeader{LogEpoch: "e1"},
			&wire.SubStart{ID: "s1", Status: wire.SubActive, EffectiveScopes: scopes("project", "p1")},
			&wire.Commit{CommitSeq: 7, ActorID: "a", Tables: []string{"notes"}, Changes: []wire.Change{{RowID: "n1",
				Op: wire.OpUpsert, RowVersion: 1, Scopes: wire.StoredScopes{{Key: "project", Value: "p1"}}, Row: note(t, s, "n1", "p1", "")}}},
			&wire.SubEnd{NextCursor: 7},
			&wire.SubStart{ID: "s2", Status: wire.SubActive, EffectiveScopes: scopes("project", "p2"), Bootstrap: true},
			&wire.SegmentInline{Payload: seg},
		}, tail...)
	})
	tail = []wire.Frame{&wire.ErrorFrame{Code: syncerr.CodeInternalError, Message: "boom", Category: "internal", Retryable: true, RecommendedAction: "retryLater"}}
	c, _ := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{})
	_ = c.Subscribe("s1", "notes", map[string][]string{"project": {"p1"}})
	_ = c.Subscribe("s2", "notes", map[string][]string{"project": {"p2"}})
	_, err := c.Sync(context.Background())
	var pe *syncerr.Error
	if !errors.As(err, &pe) || pe.Code != syncerr.CodeInternalError {
		t.Fatalf("round ending in ERROR: %v, want %s", err, syncerr.CodeInternalError)
	}
	s1, _ := c.Subscription("s1")
	s2, _ := c.Subscription("s2")
	if s1.Cursor != 7 || s2.Cursor != -1 || s2.Status != 0 {
		t.Fatalf("cursors s1 %d, s2 %d (status %s); want 7 and -1 unpersisted", s1.Cursor, s2.Cursor, s2.Status)
	}
	if len(c.Rows("notes")) != 2 {
		t.Fatalf("%d rows; want the commit and the segment block applied", len(c.Rows("notes")))
	}

	// Truncation in the middle of the segment frame: the segment is not
	// applied and s2 stays unpersisted.
	tail = []wire.Frame{&wire.SubEnd{NextCursor: 7}}
	c2, _ := sspclient.New(f.srv.URL, "tok", s, sspclient.Options{})
	_ = c2.Subscribe("s1", "notes", map[string][]string{"project": {"p1"}})
	_ = c2.Subscribe("s2", "notes", map[string][]string{"project": {"p2"}})
	if _, err := c2.Round(context.Background()); err != nil { // acquisition
		t.Fatal(err)
	}
	f.cutTail = 14 + 5 + len(seg)/2 // SUB_END, END and half the segment
	if _, err := c2.Round(context.Background()); err == nil {
		t.Fatal("a truncated response succeeded")
	}
	if s2, _ := c2.Subscription("s2"); s2.Cursor != -1 || len(c2.Rows("notes")) != 1 {
		t.Fatalf("after the truncation: s2 cursor %d, %d rows; want -1 and only the commit's row", s2.Cursor, len(c2.Rows("notes")))
	}
	if _, err := c2.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s2, _ := c2.Subscription("s2"); s2.Cursor != 7 || len(c2.Rows("notes")) != 2 {
		t.Fatalf("after the next round: s2 cursor %d, %d rows; want 7 and 2", s2.Cursor, len(c2.Rows("notes")))
	}
}
