package syncgo_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// TestPageCacheBoundedInBytes: the engine keeps the bootstrap pages it
// built, to share them with the clients that bootstrap the same rows
// next. A page's key holds the client's LimitSnapshotRows, so a client
// (or many clients with different limits) makes a new page of up to
// 50,000 rows with every limit it sends: here 80 bootstraps of the same
// 1,000 rows of 1 KiB, each with another limit, each one page of 1 MiB.
// What the cache keeps must stay bounded in bytes (32 MiB), not only in
// pages. Both drivers, one after the other (the live heap is measured).
func TestPageCacheBoundedInBytes(t *testing.T) {
	eachDriverInTurn(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		pullAs(t, e, "alice", "w") // creates the partition
		epoch := e.partitionState().LogEpoch
		title := strings.Repeat("x", 1024)
		for b := 0; b < 1000; b += 100 {
			cs := make([]*wire.PushCommit, 0, 100)
			for i := b; i < b+100; i++ {
				cs = append(cs, &wire.PushCommit{ClientCommitID: "k" + strconv.Itoa(i), Operations: []wire.Operation{
					e.upsertOp(t, map[string]any{"id": "t" + strconv.Itoa(i), "project_id": "p1", "title": title, "done": false, "rank": nil, "notes": nil})}})
			}
			r, err := e.postAs("alice", encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: "w", SchemaVersion: 1, LogEpoch: &epoch}, Commits: cs}))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range decodeResponse(t, r).Frames {
				if pr, ok := f.(*wire.PushResult); ok && pr.Status != wire.PushApplied {
					t.Fatalf("push %s: %+v", pr.ClientCommitID, pr)
				}
			}
		}
		bootstrap := func(limit int) {
			r, err := e.postAs("alice", encodeRequest(t, &wire.Request{Version: 3,
				Header: &wire.ReqHeader{ClientID: "c" + strconv.Itoa(limit), SchemaVersion: 1, LogEpoch: &epoch},
				Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows, LimitSnapshotRows: int32(limit), MaxSnapshotPages: 1},
				Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
					Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}}))
			if err != nil {
				t.Fatal(err)
			}
			inline := 0
			for _, f := range decodeResponse(t, r).Frames {
				if s, ok := f.(*wire.SegmentInline); ok {
					inline += len(s.Payload)
				}
			}
			if inline < 1000*1024 {
				t.Fatalf("bootstrap with limit %d: %d inline bytes; want the 1,000 rows of 1 KiB in one page", limit, inline)
			}
		}
		bootstrap(1000)
		before := liveHeap()
		const pages = 80
		for i := 1; i <= pages; i++ {
			bootstrap(1000 + i)
		}
		after := liveHeap()
		t.Logf("live heap %d → %d bytes over %d pages of 1 MiB", before, after, pages)
		if after > before && after-before > 48<<20 {
			t.Fatalf("live heap grew by %d MiB after %d bootstraps of the same rows with distinct page limits; want under 48 MiB (the page cache bounded at 32 MiB)", (after-before)>>20, pages)
		}
	})
}

// eachDriverInTurn runs fn as a subtest per storage driver, one after the
// other: tests that measure the live heap must not share it with a
// sibling.
func eachDriverInTurn(t *testing.T, fn func(t *testing.T, d e2eDriver)) {
	t.Helper()
	for _, d := range e2eDrivers {
		t.Run(d.name, func(t *testing.T) { fn(t, d) })
	}
}
