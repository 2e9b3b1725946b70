package syncgo_test

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// seriesCount is the number of samples in a scrape, by metric family
// (histogram buckets, sums and counts included).
func (s scraped) seriesCount() (int, map[string]int) {
	n, byName := 0, map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(s)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		n++
		byName[name]++
	}
	return n, byName
}

// The metrics' label values come from fixed sets, never from a request:
// a flood of requests each carrying its own path, segment and blob id,
// operation name, partition, actor, client id, table, commit id, method,
// content type and error creates no series. A first round of hostile
// traffic makes whatever series such traffic can make (a status code
// outside the pre-created ones, say); a second round of as many new
// values must not add one. None of these bad requests is logged at ERROR.
func TestMetricsCardinalityBounded(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server lockedBuffer
		e := newMetricsEnv(t, d, func(c *syncgo.Config) {
			c.Limits.MaxOperationsPerRequest = 10
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "s", "p1")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch

		do := func(method, path, ctype, auth string, body []byte) {
			t.Helper()
			req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			if auth != "" {
				req.Header.Set("Authorization", "Bearer "+auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			resp.Body.Close()
		}
		hostile := func(round, n int) {
			for i := range n {
				v := fmt.Sprintf("r%d-%d", round, i)
				do(http.MethodGet, "/unknown-"+v, "", "", nil)
				do("M"+strings.ToUpper(strings.ReplaceAll(v, "-", "")), "/sync", "", "", nil)
				do(http.MethodGet, "/segments/seg-"+v, "", "actor-"+v, nil)
				do(http.MethodGet, "/segments/seg-"+v+"?st=token-"+v, "", "", nil)
				do(http.MethodGet, "/blobs/blob-"+v, "", "actor-"+v, nil)
				do(http.MethodPut, "/blobs/blob-"+v, "application/octet-stream", "actor-"+v, []byte(v))
				do(http.MethodPost, "/operations", "application/json", "actor-"+v,
					[]byte(`{"kind":"query","operationId":"op-`+v+`","requestId":"`+v+`","params":{}}`))
				do(http.MethodPost, "/commits", "application/json", "actor-"+v, []byte(`{"table":"t-`+v+`"}`))
				do(http.MethodPost, "/sync", "application/x-"+v, "actor-"+v, nil)
				do(http.MethodPost, "/sync", sspclient.ContentType, "actor-"+v+"@part-"+v, []byte("garbage-"+v))
				// A well-formed request: a new client of a new actor in a new
				// partition, pushing to an unknown table and subscribing to
				// another.
				op := wire.Operation{Table: "t-" + v, RowID: "row-" + v, Op: wire.OpUpsert, Payload: []byte{0}}
				body := encodeRequest(t, &wire.Request{Version: 3,
					Header:        &wire.ReqHeader{ClientID: "client-" + v, SchemaVersion: 1, LogEpoch: &epoch},
					Commits:       []*wire.PushCommit{{ClientCommitID: "commit-" + v, Operations: []wire.Operation{op}}},
					Pull:          &wire.PullHeader{Accept: wire.AcceptInlineRows},
					Subscriptions: []*wire.Subscription{{ID: "sub-" + v, Table: "u-" + v, Cursor: -1}}})
				do(http.MethodPost, "/sync", sspclient.ContentType, "actor-"+v, body)
				// And a push that is applied, by a new actor.
				c := e.client("writer-"+v, sspclient.Options{ClientID: "client-w-" + v})
				mustUpsert(t, c, taskRow("w-"+v, "p-"+v, v))
				syncQuiet(t, c)
			}
		}
		hostile(1, 20)
		first := e.scrape()
		n1, by1 := first.seriesCount()
		hostile(2, 60)
		second := e.scrape()
		n2, by2 := second.seriesCount()
		if n2 != n1 {
			for name, c := range by2 {
				if by1[name] != c {
					t.Errorf("%s: %d series after the first round, %d after the second", name, by1[name], c)
				}
			}
			t.Fatalf("hostile values created series: %d, then %d", n1, n2)
		}
		// The traffic was counted, so the scrape is not simply stale.
		if v := second.must(t, "syncgo_push_commits_total", "status", "applied"); v < 81 {
			t.Fatalf("applied pushes %v, want at least 81", v)
		}
		for _, v := range []string{"r1-0", "r2-59", "part-", "t-r", "op-r", "seg-r", "blob-r"} {
			if strings.Contains(string(second), v) {
				t.Fatalf("the scrape carries a request's value %q", v)
			}
		}
		// Bad requests are the client's: none is logged at ERROR.
		for _, r := range logRecords(t, server.String()) {
			if r.Level == "ERROR" {
				t.Errorf("a hostile request was logged at ERROR: %s %s", r.Msg, r.Err)
			}
		}
		t.Logf("%d series", n2)
	})
}

// syncgo_push_commits_total counts each pushed commit once by the status
// the client was answered: a request of two commits applied, its retry
// answered from the journal (cached), and a commit into a scope the actor
// may not write (rejected, no conflict).
func TestMetricsPushStatusesExact(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newMetricsEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		mustUpsert(t, seed, taskRow("t0", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		e.allow("bob", map[string][]string{"project_id": {"p1"}})
		before := e.scrape()
		body := encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: "bob-device", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{
				{ClientCommitID: "c1", Operations: []wire.Operation{e.upsertOp(t, taskRow("t1", "p1", "one"))}},
				{ClientCommitID: "c2", Operations: []wire.Operation{e.upsertOp(t, taskRow("t2", "p1", "two"))}},
				{ClientCommitID: "c3", Operations: []wire.Operation{e.upsertOp(t, taskRow("t3", "p2", "not bob's"))}},
			}})
		for i := range 2 {
			if r := e.post(t, bytes.NewReader(body), map[string]string{"Authorization": "Bearer bob"}); r.status != http.StatusOK {
				t.Fatalf("push %d: HTTP %d %s", i, r.status, r.body)
			}
		}
		after := e.scrape()
		for _, want := range []struct {
			status string
			n      float64
		}{{"applied", 2}, {"cached", 2}, {"rejected", 2}} {
			got := after.must(t, "syncgo_push_commits_total", "status", want.status) -
				before.must(t, "syncgo_push_commits_total", "status", want.status)
			if got != want.n {
				t.Errorf("%s pushes counted %v, want %v", want.status, got, want.n)
			}
		}
		if v := after.must(t, "syncgo_push_conflicts_total") - before.must(t, "syncgo_push_conflicts_total"); v != 0 {
			t.Errorf("conflicts counted %v, want 0", v)
		}
	})
}
