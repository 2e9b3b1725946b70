package syncgo_test

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sqliteimage"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// imgImageOf checks that a section is one complete sqlite-image bootstrap
// (§5.3) and returns its SEGMENT_REF.
func imgImageOf(t *testing.T, s *imgSection) *wire.SegmentRef {
	t.Helper()
	if s == nil || s.end == nil {
		t.Fatal("no complete section")
	}
	if len(s.refs) != 1 || len(s.inlines) != 0 {
		t.Fatalf("section has %d SEGMENT_REF and %d SEGMENT_INLINE, want exactly one sqlite SEGMENT_REF", len(s.refs), len(s.inlines))
	}
	ref := s.refs[0]
	switch {
	case ref.MediaType != wire.MediaSQLite:
		t.Fatalf("mediaType = %v, want sqlite", ref.MediaType)
	case ref.RowCursor != nil || ref.NextRowCursor != nil:
		t.Fatalf("sqlite SEGMENT_REF has row cursors %v/%v", ref.RowCursor, ref.NextRowCursor)
	case ref.URL != nil:
		t.Fatal("SEGMENT_REF has a URL the client did not ask for")
	case !s.start.Bootstrap:
		t.Fatal("SUB_START.bootstrap is false")
	case s.end.BootstrapState != nil:
		t.Fatalf("the image did not complete the table: bootstrapState %s", *s.end.BootstrapState)
	case s.end.NextCursor != ref.AsOfCommitSeq:
		t.Fatalf("SUB_END.nextCursor = %d, want the image's asOfCommitSeq %d", s.end.NextCursor, ref.AsOfCommitSeq)
	}
	return ref
}

func TestSQLiteImageBootstrap(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t)
	pin := e.seedTasks("p1", 0, 25, 3)
	maxSeq := e.seedTasks("p2", 0, 5, 1) // another scope, after the pin

	s := e.pull("alice", "client-a", imgAcceptAll, 10, imgSub("s1", "tasks", -1, nil, "p1"))["s1"]
	ref := imgImageOf(t, s)
	scopes := map[string][]string{"project_id": {"p1"}}
	if ref.AsOfCommitSeq != pin || pin >= maxSeq {
		t.Errorf("asOfCommitSeq = %d, want the scope pin %d (maxCommitSeq %d)", ref.AsOfCommitSeq, pin, maxSeq)
	}
	if ref.Table != "tasks" || ref.RowCount != 25 || ref.ScopeDigest != wire.ScopeDigest(scopes) {
		t.Errorf("descriptor = %+v", ref)
	}
	if n := e.builds(); n != 1 {
		t.Errorf("%d image builds, want 1", n)
	}

	d := e.download("alice", ref.SegmentID, scopes)
	if d.status != http.StatusOK {
		t.Fatalf("download: HTTP %d: %s", d.status, d.body)
	}
	if ct := d.header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	if etag := d.header.Get("ETag"); etag != `"`+ref.SegmentID+`"` {
		t.Errorf("ETag = %q", etag)
	}
	if imgSegmentID(d.body) != ref.SegmentID || int64(len(d.body)) != ref.ByteLength {
		t.Fatalf("downloaded %d bytes hashing to %s; descriptor %d bytes, %s", len(d.body), imgSegmentID(d.body), ref.ByteLength, ref.SegmentID)
	}
	tbl, _ := e.schema.Table("tasks")
	err := sqliteimage.Verify(context.Background(), d.body, sqliteimage.Expect{SegmentID: ref.SegmentID, Table: "tasks",
		SchemaVersion: 1, AsOfCommitSeq: ref.AsOfCommitSeq, ScopeDigest: ref.ScopeDigest, RowCount: ref.RowCount,
		Columns: tbl.WireColumns(), PrimaryKey: tbl.PrimaryKey()})
	if err != nil {
		t.Fatalf("the client-side checks of §5.3 fail: %v", err)
	}
	rows, err := sqliteimage.ReadRows(context.Background(), d.body, tbl.WireColumns(), tbl.PrimaryKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 25 {
		t.Fatalf("image has %d rows, want 25", len(rows))
	}
	for i, r := range rows {
		want := imgTask("p1", i)
		if r.ServerVersion != 3 || !reflect.DeepEqual(r.Values, want) {
			t.Errorf("row %d = v%d %+v,\nwant v3 %+v", i, r.ServerVersion, r.Values, want)
		}
	}

	// A conditional download and the re-authorization of §5.5 behave as
	// for rows segments.
	if d := e.download("alice", ref.SegmentID, scopes, "If-None-Match", `"`+ref.SegmentID+`"`); d.status != http.StatusNotModified {
		t.Errorf("If-None-Match: HTTP %d, want 304", d.status)
	}
	if d := e.download("alice", ref.SegmentID, map[string][]string{"project_id": {"p2"}}); d.status != http.StatusForbidden {
		t.Errorf("download under other scopes: HTTP %d, want 403", d.status)
	}
	if d := e.download("outsider", ref.SegmentID, scopes); d.status != http.StatusForbidden {
		t.Errorf("download by an actor without the scope: HTTP %d, want 403", d.status)
	}
	if d := e.download("alice@other-tenant", ref.SegmentID, scopes); d.status != http.StatusNotFound {
		t.Errorf("download from another partition: HTTP %d, want 404", d.status)
	}

	// The next incremental pull from the scope pin replays an empty window:
	// the commit to p2 after the pin is not this subscription's.
	next := e.pull("alice", "client-a", imgAcceptAll, 10, imgSub("s1", "tasks", ref.AsOfCommitSeq, nil, "p1"))["s1"]
	if next.start.Bootstrap || len(next.commits) != 0 || next.end.NextCursor != maxSeq {
		t.Errorf("incremental pull after the image: bootstrap %v, %d commits, nextCursor %d (want false, 0, %d)",
			next.start.Bootstrap, len(next.commits), next.end.NextCursor, maxSeq)
	}
}

func TestSQLiteImageReuse(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t)
	e.seedTasks("p1", 0, 30, 1)
	e.seedTasks("p2", 0, 30, 1)
	sub := func() *wire.Subscription { return imgSub("s", "tasks", -1, nil, "p1") }

	first := imgImageOf(t, e.pull("alice", "client-a", imgAcceptAll, 10, sub())["s"])
	// A commit to another scope moves maxCommitSeq but not the scope pin.
	e.seedTasks("p2", 30, 31, 1)
	second := imgImageOf(t, e.pull("bob", "client-b", imgAcceptAll, 10, sub())["s"])
	if second.SegmentID != first.SegmentID || second.AsOfCommitSeq != first.AsOfCommitSeq {
		t.Errorf("second client got %s at %d, want the first image %s at %d", second.SegmentID, second.AsOfCommitSeq, first.SegmentID, first.AsOfCommitSeq)
	}
	// A different page size does not change the image either.
	third := imgImageOf(t, e.pull("carol", "client-c", imgAcceptAll, 20, sub())["s"])
	if third.SegmentID != first.SegmentID {
		t.Errorf("a client with another limitSnapshotRows got %s, want %s", third.SegmentID, first.SegmentID)
	}
	if n := e.builds(); n != 1 {
		t.Fatalf("%d image builds for three clients with the same key, want 1", n)
	}
	if d := e.download("bob", second.SegmentID, map[string][]string{"project_id": {"p1"}}); d.status != http.StatusOK {
		t.Errorf("second client's download: HTTP %d", d.status)
	}

	// Other scopes are another key.
	both := imgImageOf(t, e.pull("alice", "client-d", imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1", "p2"))["s"])
	if both.RowCount != 61 || both.ScopeDigest == first.ScopeDigest || e.builds() != 2 {
		t.Errorf("p1+p2 image: %d rows, digest %s, %d builds", both.RowCount, both.ScopeDigest, e.builds())
	}

	// A change inside the scope moves the scope pin: a new image.
	pin := e.seedTasks("p1", 30, 31, 2)
	fresh := imgImageOf(t, e.pull("dave", "client-e", imgAcceptAll, 10, sub())["s"])
	if fresh.AsOfCommitSeq != pin || fresh.RowCount != 31 || e.builds() != 3 {
		t.Errorf("after a change in scope: asOf %d (want %d), %d rows, %d builds", fresh.AsOfCommitSeq, pin, fresh.RowCount, e.builds())
	}
}

func TestSQLiteImageConcurrentColdBuilds(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t)
	e.seedTasks("p1", 0, 2000, 1)
	const clients = 8
	ids := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			s := e.pull("alice", "client-"+string(rune('a'+i)), imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"]
			if len(s.refs) == 1 {
				ids[i] = s.refs[0].SegmentID
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		if id == "" || id != ids[0] {
			t.Errorf("client %d got image %q, client 0 %q", i, id, ids[0])
		}
	}
	if n := e.builds(); n != 1 {
		t.Errorf("%d builds for %d concurrent cold requests, want 1", n, clients)
	}
}

func TestSQLiteImageRowsLane(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t)
	e.seedTasks("p1", 0, 25, 1)
	var secrets [][]wire.Value
	for i := range 25 {
		secrets = append(secrets, []wire.Value{{Str: string(rune('a'+i%26)) + "-secret"}, {Str: "p1"}, {Bytes: []byte("ciphertext")}})
	}
	e.seed("secrets", secrets, 1)

	// A token mid-table, from a pull that did not accept images.
	paged := e.pullWith("alice", "client-t", wire.PullHeader{Accept: imgAcceptRows, LimitSnapshotRows: 10, MaxSnapshotPages: 1},
		imgSub("s", "tasks", -1, nil, "p1"))["s"]
	if paged.end.BootstrapState == nil {
		t.Fatal("a rows-lane bootstrap of 25 rows in pages of 10 completed in one pull")
	}
	tests := []struct {
		name   string
		accept uint8
		limit  int32
		sub    *wire.Subscription
		pages  int  // segments expected
		done   bool // bootstrap completes
	}{
		{"without accept bit 2", imgAcceptRows, 10, imgSub("s", "tasks", -1, nil, "p1"), 3, true},
		{"one page or less", imgAcceptAll, 25, imgSub("s", "tasks", -1, nil, "p1"), 1, true},
		{"resumed mid-table", imgAcceptAll, 10, imgSub("s", "tasks", paged.end.NextCursor, paged.end.BootstrapState, "p1"), 2, true},
		{"encrypted column", imgAcceptAll, 10, imgSub("s", "secrets", -1, nil, "p1"), 3, true},
	}
	for _, tc := range tests {
		s := e.pull("alice", "client-x", tc.accept, tc.limit, tc.sub)["s"]
		for _, ref := range s.refs {
			if ref.MediaType != wire.MediaRows {
				t.Errorf("%s: a %v SEGMENT_REF", tc.name, ref.MediaType)
			}
		}
		if got := len(s.refs) + len(s.inlines); got != tc.pages {
			t.Errorf("%s: %d rows segments, want %d", tc.name, got, tc.pages)
		}
		if done := s.end.BootstrapState == nil; done != tc.done {
			t.Errorf("%s: complete = %v, want %v", tc.name, done, tc.done)
		}
	}
	if n := e.builds(); n != 0 {
		t.Errorf("%d image builds on the rows lane, want 0", n)
	}
}

func TestSQLiteImageLimits(t *testing.T) {
	t.Parallel()
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		e := newImgEnv(t, func(c *syncgo.Config) { c.Limits.SQLiteImageMaxBytes = 2048 })
		e.seedTasks("p1", 0, 200, 1)
		for _, client := range []string{"client-a", "client-b"} {
			s := e.pull("alice", client, imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"]
			if len(s.refs)+len(s.inlines) != 4 || s.end.BootstrapState == nil {
				t.Fatalf("%s: %d segments, bootstrapState %v; want four rows pages of a paged bootstrap", client, len(s.refs)+len(s.inlines), s.end.BootstrapState)
			}
			for _, ref := range s.refs {
				if ref.MediaType != wire.MediaRows {
					t.Errorf("%s: a %v SEGMENT_REF", client, ref.MediaType)
				}
			}
		}
		if n := e.logs.count("sqlite image not served; the rows lane serves the table"); n != 1 || e.builds() != 0 {
			t.Errorf("%d oversized builds and %d images for two clients, want 1 and 0", n, e.builds())
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		e := newImgEnv(t, func(c *syncgo.Config) { c.Limits.SQLiteImageMaxBytes = -1 })
		e.seedTasks("p1", 0, 30, 1)
		s := e.pull("alice", "client-a", imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"]
		if len(s.refs) != 0 || len(s.inlines) != 3 || e.builds() != 0 {
			t.Errorf("disabled lane: %d refs, %d inline segments, %d builds", len(s.refs), len(s.inlines), e.builds())
		}
	})
}

func TestSQLiteImageExpiry(t *testing.T) {
	t.Parallel()
	e := newImgEnv(t)
	e.seedTasks("p1", 0, 30, 1)
	scopes := map[string][]string{"project_id": {"p1"}}
	first := imgImageOf(t, e.pull("alice", "client-a", imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"])

	// Reuse refreshes the publication: an hour before the first
	// publication expires, a reuse grants another full day.
	e.nowMs.Add(23 * 3600_000)
	again := imgImageOf(t, e.pull("bob", "client-b", imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"])
	if again.SegmentID != first.SegmentID || e.builds() != 1 {
		t.Fatalf("reuse before expiry: %s, %d builds", again.SegmentID, e.builds())
	}
	e.nowMs.Add(2 * 3600_000)
	if d := e.download("bob", first.SegmentID, scopes); d.status != http.StatusOK {
		t.Errorf("download after the first publication's expiry but within the refresh: HTTP %d", d.status)
	}

	// Past the refreshed expiry the segment is expired and a pull builds
	// a new image.
	e.nowMs.Add(24 * 3600_000)
	d := e.download("bob", first.SegmentID, scopes)
	if pe, _ := syncerr.ParseJSON(d.body); d.status != http.StatusNotFound || pe == nil || pe.Code != syncerr.CodeSegmentExpired {
		t.Errorf("download after expiry: HTTP %d %s, want 404 sync.segment_expired", d.status, d.body)
	}
	imgImageOf(t, e.pull("carol", "client-c", imgAcceptAll, 10, imgSub("s", "tasks", -1, nil, "p1"))["s"])
	if n := e.builds(); n != 2 {
		t.Errorf("%d builds after expiry, want 2", n)
	}
}
