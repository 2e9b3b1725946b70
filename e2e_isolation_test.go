package syncgo_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// The isolation audit: no client ever sees a row outside its scopes, on
// the read paths other than realtime deltas and revocation.

// A push cannot be used to read a row of a scope the actor lacks: every
// kind of write aimed at a row id stored in another scope (versioned,
// unversioned, baseVersion 0, partial, with the actor's own scope value
// forged in the payload, a delete, at wire versions 2 and 3) is
// sync.forbidden, with no serverRow and no trace of the row's values, and
// the row stays as it was.
func TestE2EIsolationPushProbes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		mustUpsert(t, w, taskRow("secret", "p1", "the secret title"))
		mustUpsert(t, w, map[string]any{"id": "secret", "title": "the secret title v2"}, sspclient.BaseVersion(1))
		syncQuiet(t, w)
		before := e.serverRows("tasks")
		e.allow("mallory", map[string][]string{"project_id": {"p2"}})

		for _, v := range []uint16{wire.Version2, wire.Version3} {
			m := e.client("mallory", sspclient.Options{WireVersion: v})
			probes := map[string]string{}
			probe := func(what string, values map[string]any, opts ...sspclient.OpOption) {
				probes[what] = mustUpsert(t, m, values, opts...)
			}
			own := taskRow("secret", "p2", "mine")
			probe("unversioned full row in own scope", own)
			probe("baseVersion 0", own, sspclient.BaseVersion(0))
			probe("stale baseVersion 1", own, sspclient.BaseVersion(1))
			probe("current baseVersion 2", own, sspclient.BaseVersion(2))
			probe("baseVersion ahead", own, sspclient.BaseVersion(99))
			if v >= wire.Version3 {
				probe("partial, no scope column, base 1", map[string]any{"id": "secret", "title": "x"}, sspclient.BaseVersion(1))
				probe("partial, no scope column, base 0", map[string]any{"id": "secret", "title": "x"}, sspclient.BaseVersion(0))
			}
			del, err := m.Delete("tasks", "secret")
			if err != nil {
				t.Fatal(err)
			}
			probes["delete"] = del
			for range 20 {
				if m.Pending() == 0 {
					break
				}
				if _, err := m.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for what, id := range probes {
				o, ok := m.Outcome(id)
				if !ok {
					t.Fatalf("v%d %s: no outcome", v, what)
				}
				if o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeForbidden {
					t.Errorf("v%d %s: %s; want rejected %s", v, what, statusOf(o), syncerr.CodeForbidden)
				}
				for _, r := range o.Results {
					if len(r.ServerRow) > 0 || r.ServerVersion != 0 || bytes.Contains([]byte(r.Message), []byte("secret title")) {
						t.Errorf("v%d %s: result %+v discloses the stored row", v, what, r)
					}
				}
				for _, dt := range o.Details {
					if strings.Contains(fmt.Sprint(dt), "secret title") {
						t.Errorf("v%d %s: details %+v disclose the stored row", v, what, dt)
					}
				}
			}
			if _, ok := m.Row("tasks", "secret"); ok {
				t.Errorf("v%d: mallory's replica holds the row", v)
			}
		}
		// The same probes through POST /commits (JSON).
		body := `{"clientId":"mallory-backend","commits":[` +
			`{"clientCommitId":"j1","operations":[{"table":"tasks","op":"upsert","baseVersion":0,"row":{"id":"secret","project_id":"p2","title":"x","done":false,"rank":null,"notes":null}}]},` +
			`{"clientCommitId":"j2","operations":[{"table":"tasks","op":"upsert","baseVersion":1,"row":{"id":"secret","title":"x"}}]},` +
			`{"clientCommitId":"j3","operations":[{"table":"tasks","op":"delete","rowId":"secret"}]}]}`
		req, _ := http.NewRequest(http.MethodPost, e.url+"/commits", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer mallory")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Count(out.String(), `"code":"`+syncerr.CodeForbidden+`"`) != 3 ||
			strings.Contains(out.String(), "serverRow") || strings.Contains(out.String(), "secret title") {
			t.Errorf("JSON commits probing another scope's row: HTTP %d %s; want three %s, no serverRow", resp.StatusCode, out.String(), syncerr.CodeForbidden)
		}
		sameRows(t, "server after the probes", e.serverRows("tasks"), before)
	})
}

// Scope values that look like patterns, separators or wildcards match
// only themselves: an actor allowed such values, subscribing to them
// alone or beside values it lacks, holds only rows whose stored value is
// byte for byte one it is allowed and requested; Unicode normalisation
// variants are different values; a requested "*" fails the request.
func TestE2EIsolationOddScopeValues(t *testing.T) {
	const (
		nfc = "caf\u00e9"
		nfd = "cafe\u0301"
	)
	long := strings.Repeat("L", 200)
	stored := []string{"p1", "p%", "p_", "pX", "p", "%", "_", "a", "b", "a,b", `a","b`, "x:y", "x", "y",
		nfc, nfd, "P1", " p1", "p1 ", long, long + "M", `\`, "[p1]", "{}", "null", "p1\x00"}
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		for i, v := range stored {
			mustUpsert(t, w, taskRow(fmt.Sprintf("r%02d", i), v, "row of "+v))
		}
		syncQuiet(t, w)
		byID := map[string]string{}
		for i, v := range stored {
			byID[fmt.Sprintf("r%02d", i)] = v
		}
		allowed := []string{"p%", "p_", "a,b", "x:y", nfc, long, `\`, "[p1]"}
		e.allow("odd", map[string][]string{"project_id": allowed})

		for _, req := range [][]string{
			{"p%"}, {"p_"}, {"a,b"}, {"x:y"}, {nfc}, {long}, {`\`}, {"[p1]"},
			{"p%", "p1"}, {"p_", "pX", "p"}, {"a,b", "a", "b"}, {nfc, nfd}, {long, long + "M"},
			allowed,
		} {
			c := e.client("odd", sspclient.Options{})
			mustSubscribe(t, c, "s", req...)
			syncQuiet(t, c)
			want := map[string]bool{}
			for _, v := range req {
				if slices.Contains(allowed, v) {
					want[v] = true
				}
			}
			got := map[string]bool{}
			for id := range c.Rows("tasks") {
				v := byID[id]
				if !want[v] {
					t.Errorf("requesting %q: the client holds %s of project %q", req, id, v)
				}
				got[v] = true
			}
			for v := range want {
				if v != "" && !got[v] && slices.Contains(stored, v) {
					t.Errorf("requesting %q: no row of allowed project %q", req, v)
				}
			}
		}
		// Values it lacks only: revoked, nothing delivered.
		for _, req := range [][]string{{"p1"}, {"%"}, {"_"}, {nfd}, {"a", "b"}, {"P1", " p1", "p1 "}} {
			c := e.client("odd", sspclient.Options{})
			mustSubscribe(t, c, "s", req...)
			sections := 0
			for _, res := range syncQuiet(t, c) {
				for _, s := range res.Sections {
					if sections++; s.Status != wire.SubRevoked {
						t.Errorf("requesting %q: section status %v, want revoked", req, s.Status)
					}
				}
			}
			if sections == 0 {
				t.Errorf("requesting %q: no section", req)
			}
			if n := len(c.Rows("tasks")); n != 0 {
				t.Errorf("requesting %q: %d rows delivered", req, n)
			}
		}
		// A requested "*" fails the request, even for an actor allowed
		// every value; so does a NUL in a value.
		for _, v := range []string{"*", "p1\x00"} {
			c := e.client("writer", sspclient.Options{})
			mustSubscribe(t, c, "s", v)
			if _, err := c.SyncUntilQuiet(context.Background(), 5); err == nil || !strings.Contains(err.Error(), syncerr.CodeInvalidSubscription) {
				t.Errorf("requesting %q: %v, want %s", v, err, syncerr.CodeInvalidSubscription)
			}
			if n := len(c.Rows("tasks")); n != 0 {
				t.Errorf("requesting %q: %d rows delivered", v, n)
			}
		}
	})
}

// Two partitions with the same table, row ids and scope values: nothing
// crosses. A blob uploaded and referenced in one is neither downloadable
// nor referenceable from the other by an actor of the same scope values;
// a versioned push to a row id that exists only in the other partition
// finds no row (no conflict, no serverRow); once the id exists in both, a
// conflict's serverRow is the row of the pusher's own partition.
func TestE2EIsolationTwinPartitions(t *testing.T) {
	forEachBlobKind(t, func(t *testing.T, k blobKind) {
		e := newBlobEnv(t, k)
		data := []byte("tenant-1 confidential attachment")
		id := blobOf(data)
		wantAnswer(t, "tenant-1 upload", e.put("owner", data, id), 200, "")
		if o := e.attach(e.client("owner", sspclient.Options{}), "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("tenant-1 reference: %s", statusOf(o))
		}
		e.allow("twin", map[string][]string{"project_id": {"p1"}})
		twin := "twin@tenant-2"
		if a := e.get(twin, id); a.status == http.StatusOK || bytes.Contains(a.body, data) {
			t.Fatalf("tenant-2 download of tenant-1's blob: HTTP %d %s", a.status, a.body)
		}
		tc := e.client(twin, sspclient.Options{})
		if o := e.attach(tc, "b1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeBlobNotFound {
			t.Fatalf("tenant-2 reference to tenant-1's blob: %s; want rejected %s", statusOf(o), syncerr.CodeBlobNotFound)
		}
		if a := e.get(twin, id); a.status == http.StatusOK || bytes.Contains(a.body, data) {
			t.Fatalf("tenant-2 download after its rejected reference: HTTP %d", a.status)
		}
		grant := e.do(http.MethodPost, "/blobs/"+id+"/upload-grant", twin, strings.NewReader(fmt.Sprintf(`{"byteLength":%d}`, len(data))))
		if bytes.Contains(grant.body, []byte(`"present"`)) {
			t.Fatalf("tenant-2 upload grant tells tenant-1's blob is present: %s", grant.body)
		}

		// A versioned edit of a1, which only tenant-1 holds.
		cid, err := tc.Upsert("attachments", map[string]any{"id": "a1", "project_id": "p1", "title": "probe"}, sspclient.BaseVersion(1))
		if err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, tc)
		o, _ := tc.Outcome(cid)
		if o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeRowMissing {
			t.Fatalf("tenant-2 versioned edit of tenant-1's a1: %s; want rejected %s", statusOf(o), syncerr.CodeRowMissing)
		}
		for _, r := range o.Results {
			if len(r.ServerRow) > 0 || r.ServerVersion != 0 {
				t.Fatalf("tenant-2 probe result %+v discloses tenant-1's row", r)
			}
		}
		// a1 in tenant-2 too: a conflict shows tenant-2's row.
		if o := e.attach(tc, "a1", "p1", nil); o.Status != wire.PushApplied {
			t.Fatalf("tenant-2's own a1: %s", statusOf(o))
		}
		if o := e.attach(e.client("owner", sspclient.Options{}), "a1", "p1", ptr(blobRef(id, len(data)))); o.Status != wire.PushApplied {
			t.Fatalf("tenant-1 edit of a1: %s", statusOf(o))
		}
		cid, err = tc.Upsert("attachments", map[string]any{"id": "a1", "title": "stale"}, sspclient.BaseVersion(0))
		if err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, tc)
		o, _ = tc.Outcome(cid)
		cf, ok := o.Conflict()
		if !ok {
			t.Fatalf("tenant-2 baseVersion 0 on its a1: %s; want a conflict", statusOf(o))
		}
		if row := decodeRow(t, tc, "attachments", cf.ServerRow); row["file"] != nil || cf.ServerVersion != 1 {
			t.Fatalf("tenant-2's conflict serverRow %v v%d; want its own a1 (no file, v1)", row, cf.ServerVersion)
		}
		// Pulls: each partition's client holds its own rows only.
		rc := e.client(twin, sspclient.Options{})
		if err := rc.Subscribe("s", "attachments", map[string][]string{"project_id": {"p1"}}); err != nil {
			t.Fatal(err)
		}
		syncQuiet(t, rc)
		rows := rc.Rows("attachments")
		tbl, _ := e.schema.Table("attachments")
		if len(rows) != 1 || rows["a1"].Map(tbl)["file"] != nil {
			t.Fatalf("tenant-2 pull holds %v; want its a1 only", rows)
		}
	})
}

// A forged X-Syncular-Scopes header never opens a segment of a scope the
// actor lacks: duplicate keys (either order), the lacking value spelt
// with JSON escapes, beside the allowed one, among many values, under an
// undeclared key or "*", malformed or as Latin-1 bytes are each refused,
// with or without If-None-Match, and none answers 200 or 304.
func TestE2EIsolationForgedScopesHeader(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		w := e.client("writer", sspclient.Options{})
		for i := range 8 {
			mustUpsert(t, w, taskRow(fmt.Sprintf("s%02d", i), "p2", "secret of p2"))
			mustUpsert(t, w, taskRow(fmt.Sprintf("o%02d", i), "p1", "open p1"))
		}
		syncQuiet(t, w)
		// A reader of p2 gets the p2 segment by reference.
		r := e.client("reader", sspclient.Options{Accept: wire.AcceptExternalRows})
		mustSubscribe(t, r, "s", "p2")
		var refs []wire.SegmentRef
		for _, res := range syncQuiet(t, r) {
			for _, s := range res.Sections {
				refs = append(refs, s.Refs...)
			}
		}
		if len(refs) != 1 {
			t.Fatalf("%d refs, want 1", len(refs))
		}
		seg := refs[0].SegmentID
		// The control: the request as built below serves the reader.
		ctl, _ := http.NewRequest(http.MethodGet, e.url+"/segments/"+seg, nil)
		ctl.Header.Set("Authorization", "Bearer reader")
		ctl.Header.Set("X-Syncular-Scopes", `{"project_id":["p2"],"project_id":["p2"]}`)
		if resp, err := http.DefaultClient.Do(ctl); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the reader's own download: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		e.allow("mallory", map[string][]string{"project_id": {"p1"}})
		many := make([]string, 0, 5000)
		for i := range 5000 {
			many = append(many, fmt.Sprintf("%q", fmt.Sprintf("v%d", i)))
		}
		for _, h := range []string{
			`{"project_id":["p2"]}`,
			`{"project_id":["p1"],"project_id":["p2"]}`,
			`{"project_id":["p2"],"project_id":["p1"]}`,
			`{"project_id":["p\u0032"]}`,
			`{"project_id":["p1","p2"]}`,
			`{"project_id":["p2","p2"]}`,
			`{"project_id":["p1",` + strings.Join(many, ",") + `,"p2"]}`,
			`{"project_id":["*"]}`,
			`{"project_id":["p2"],"other":["x"]}`,
			`{"project_id":"p2"}`,
			`{"project_id":[["p2"]]}`,
			`{"project_id":["p2"]`,
			`{}`,
			`[]`,
			"{\"project_id\":[\"p2\xe9\"]}",
		} {
			for _, inm := range []string{"", `"` + seg + `"`, "*"} {
				req, _ := http.NewRequest(http.MethodGet, e.url+"/segments/"+seg, nil)
				req.Header.Set("Authorization", "Bearer mallory")
				req.Header.Set("X-Syncular-Scopes", h)
				if inm != "" {
					req.Header.Set("If-None-Match", inm)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body bytes.Buffer
				_, _ = body.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 400 || strings.Contains(body.String(), "secret") || resp.Header.Get("ETag") != "" {
					short := h
					if len(short) > 80 {
						short = short[:80]
					}
					t.Errorf("header %s, If-None-Match %q: HTTP %d, ETag %q", short, inm, resp.StatusCode, resp.Header.Get("ETag"))
				}
			}
		}
	})
}

// A table scoped by two variables: the effective scopes are intersected
// per variable, a subscription that names both gets only the rows whose
// two values it is allowed, one that loses a variable is revoked, a
// segment of one pair is refused to an actor of another pair whatever
// header it sends, and writes need both values allowed.
func TestE2EIsolationTwoVariables(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		sc, err := schema.New(1).
			Table("docs", "id", schema.String("id"), schema.String("org_id"), schema.String("project_id"), schema.String("title")).
			Scope("org:{org_id}").Scope("project:{project_id}").
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		e := &e2eEnv{t: t, schema: sc, allowed: map[string]map[string][]string{}, store: d.open(t)}
		n := startNode(t, e, e.store, func(c *syncgo.Config) { c.Limits.InlineSegmentMaxBytes = syncgo.NeverInline })
		e.srv, e.url = n.srv, n.http.URL
		all := map[string][]string{"org_id": {"*"}, "project_id": {"*"}}
		e.allow("writer", all)
		w := e.client("writer", sspclient.Options{})
		owner := map[string][2]string{}
		for _, o := range []string{"o1", "o2"} {
			for _, p := range []string{"p1", "p2"} {
				for i := range 3 {
					id := fmt.Sprintf("%s-%s-%d", o, p, i)
					owner[id] = [2]string{o, p}
					if _, err := w.Upsert("docs", map[string]any{"id": id, "org_id": o, "project_id": p, "title": "t"}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		syncQuiet(t, w)
		e.allow("ann", map[string][]string{"org_id": {"o1"}, "project_id": {"p1"}})
		e.allow("bea", map[string][]string{"org_id": {"o1"}, "project_id": {"p2"}})

		pull := func(actor string, req map[string][]string) (*sspclient.Client, []wire.SegmentRef, bool) {
			c := e.client(actor, sspclient.Options{Accept: wire.AcceptExternalRows})
			if err := c.Subscribe("s", "docs", req); err != nil {
				t.Fatal(err)
			}
			var refs []wire.SegmentRef
			revoked := false
			for _, res := range syncQuiet(t, c) {
				for _, s := range res.Sections {
					refs = append(refs, s.Refs...)
					revoked = revoked || s.Status == wire.SubRevoked
				}
			}
			return c, refs, revoked
		}
		onlyPair := func(what string, c *sspclient.Client, o, p string) {
			rows := c.Rows("docs")
			if len(rows) != 3 {
				t.Errorf("%s: %d rows, want the 3 of (%s, %s)", what, len(rows), o, p)
			}
			for id := range rows {
				if owner[id] != [2]string{o, p} {
					t.Errorf("%s: holds %s of %v", what, id, owner[id])
				}
			}
		}
		c, refs, _ := pull("ann", map[string][]string{"org_id": {"o1"}, "project_id": {"p1"}})
		onlyPair("ann, exact", c, "o1", "p1")
		c, _, _ = pull("ann", map[string][]string{"org_id": {"o1", "o2"}, "project_id": {"p1", "p2"}})
		onlyPair("ann, wider on both", c, "o1", "p1")
		for _, req := range []map[string][]string{
			{"org_id": {"o2"}, "project_id": {"p1"}},
			{"org_id": {"o1"}, "project_id": {"p2"}},
		} {
			if c, _, revoked := pull("ann", req); !revoked || len(c.Rows("docs")) != 0 {
				t.Errorf("ann requesting %v: revoked %v, %d rows; want revoked and none", req, revoked, len(c.Rows("docs")))
			}
		}

		if len(refs) == 0 {
			t.Fatal("ann's bootstrap sent no SEGMENT_REF")
		}
		bea := e.client("bea", sspclient.Options{})
		for _, h := range []map[string][]string{
			{"org_id": {"o1"}, "project_id": {"p1"}},
			{"org_id": {"o1"}, "project_id": {"p1", "p2"}},
			{"org_id": {"o1"}},
			{"project_id": {"p1"}},
		} {
			if err := dl(bea, refs[0].SegmentID, h); err == nil {
				t.Errorf("bea downloaded ann's (o1, p1) segment with header %v", h)
			}
		}
		if _, err := e.client("ann", sspclient.Options{}).DownloadSegment(context.Background(), refs[0].SegmentID,
			map[string][]string{"org_id": {"o1"}, "project_id": {"p1"}}); err != nil {
			t.Fatalf("ann's own segment: %v", err)
		}

		a := e.client("ann", sspclient.Options{})
		var ids []string
		for _, pair := range [][2]string{{"o1", "p2"}, {"o2", "p1"}, {"o2", "p2"}} {
			id, err := a.Upsert("docs", map[string]any{"id": "new-" + pair[0] + pair[1], "org_id": pair[0], "project_id": pair[1], "title": "x"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for range 10 {
			if a.Pending() == 0 {
				break
			}
			if _, err := a.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			if o, _ := a.Outcome(id); o.Status != wire.PushRejected || o.ErrorCode() != syncerr.CodeForbidden {
				t.Errorf("ann's write outside her pair: %s; want rejected %s", statusOf(o), syncerr.CodeForbidden)
			}
		}
	})
}

// Server.CloseActor, which a host calls when an actor's credentials are
// revoked, closes the actor's watch sockets (/operations/realtime) as it
// does its /realtime sockets: a watch opened with the revoked
// credentials gets no snapshot of a later commit. Other actors' watches
// go on.
func TestE2EIsolationCloseActorClosesWatches(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "writer", "tasks", taskRow("t1", "p1", "one"))
		f.awaitWatchListener(t)
		alice := dialWatch(t, f.e2eEnv, "alice")
		bob := dialWatch(t, f.e2eEnv, "bob")
		for _, w := range []*watchSock{alice, bob} {
			w.watch("w", "tasksByProject", project("p1"))
			if got := snapshotIDs(t, w.next()); !slices.Equal(got, []string{"t1"}) {
				t.Fatalf("first snapshot %v", got)
			}
		}
		if n := f.srv.CloseActor(e2ePartition, "alice"); n != 1 {
			t.Fatalf("CloseActor closed %d sockets, want alice's watch socket", n)
		}
		seed(t, f.e2eEnv, "writer", "tasks", taskRow("t2", "p1", "after the revocation"))
		if got := snapshotIDs(t, bob.next()); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Fatalf("bob's snapshot after the commit: %v", got)
		}
		select {
		case m, open := <-alice.msgs:
			if open {
				t.Fatalf("alice's watch, after CloseActor: %v; want the socket closed", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("alice's watch socket is still open 10 s after CloseActor")
		}
	})
}
