package syncgo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// An identity the wire or a driver cannot carry is refused at
// authentication, whatever the host's Authenticate returned: an actor id
// that is not UTF-8 would otherwise be applied on SQLite and then fail
// every pull of the commit's window (its COMMIT frame cannot be encoded),
// and a NUL or an overlong id fails on Postgres as a retryable internal
// error. Each is answered 401 sync.auth_required on every route and
// writes nothing; a normal client is served afterwards.
func TestE2EUnusableIdentityRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		identities := map[string]syncgo.Auth{
			"nul-actor":     {ActorID: "ev\x00il", Partition: e2ePartition},
			"long-actor":    {ActorID: strings.Repeat("a", syncgo.MaxIdentifierBytes+1), Partition: e2ePartition},
			"latin1-part":   {ActorID: "mallory", Partition: "tenant-\xff"},
			"nul-part":      {ActorID: "mallory", Partition: "tenant\x00"},
			"long-part":     {ActorID: "mallory", Partition: strings.Repeat("p", syncgo.MaxIdentifierBytes+1)},
			"max-length-ok": {ActorID: strings.Repeat("b", syncgo.MaxIdentifierBytes), Partition: e2ePartition},
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Authenticate = func(r *http.Request) (syncgo.Auth, error) {
				tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				if a, ok := identities[tok]; ok {
					return a, nil
				}
				return bearerAuth(r)
			}
		})
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "tasks-p1", "p1")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		push := encodeRequest(t, &wire.Request{Version: 3,
			Header:  &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: hostileCommit, Operations: []wire.Operation{e.upsertOp(t, taskRow("h1", "p1", "hostile"))}}}})

		before := e.snapshot(t, hostileClient, hostileCommit)
		// "ev\xffil" reaches the test's bearer authentication as is (an
		// HTTP header may carry obs-text bytes): the finding's repro.
		for _, tok := range []string{"ev\xffil", "nul-actor", "long-actor", "latin1-part", "nul-part", "long-part"} {
			r := e.post(t, body(push), map[string]string{"Authorization": "Bearer " + tok})
			wantJSONError(t, r, http.StatusUnauthorized, syncerr.CodeAuthRequired)
			if after := e.snapshot(t, hostileClient, hostileCommit); !after.equal(before) {
				t.Fatalf("%q: the refused push changed the database:\nbefore %+v\nafter  %+v", tok, before, after)
			}
			req, _ := http.NewRequest(http.MethodGet, e.url+"/realtime?clientId=rt-"+url.QueryEscape(tok[:3]), nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%q: /realtime answered %d, want 401 before any upgrade", tok, resp.StatusCode)
			}
		}

		// An identity at the length limit is served.
		ok := e.client("max-length-ok", sspclient.Options{})
		mustSubscribe(t, ok, "tasks-p1", "p1")
		mustUpsert(t, ok, taskRow("t2", "p1", "at the limit"))
		syncQuiet(t, ok)
		syncQuiet(t, seed)
		if got := len(clientRows(t, seed, "tasks")); got != 2 {
			t.Fatalf("after the refusals the seed client holds %d rows, want 2", got)
		}
	})
}

// A commit stored before the check with an actor id that is not UTF-8
// (SQLite holds any bytes; Postgres refuses them) does not make the pulls
// of its window fail forever: its COMMIT frame carries the actor id with
// the invalid bytes replaced by U+FFFD, and the changes are delivered.
func TestE2EStoredUnencodableActorIsRendered(t *testing.T) {
	e := newE2EEnv(t, e2eDrivers[0])
	alice := e.client("alice", sspclient.Options{})
	mustSubscribe(t, alice, "tasks-p1", "p1")
	syncQuiet(t, alice)

	tbl, _ := e.schema.Table("tasks")
	vals := []wire.Value{{Str: "t-old"}, {Str: "p1"}, {Str: "written long ago"}, {Bool: false}, {Null: true}, {Null: true}}
	payload, err := tbl.RowCodec().AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	scopes := wire.StoredScopes{{Key: "project_id", Value: "p1"}}
	err = e.store.Write(context.Background(), e2ePartition, func(ctx context.Context, tx store.WriteTx) error {
		if err := tx.UpsertRow(ctx, store.RowWrite{Row: store.Row{Table: "tasks", RowID: "t-old", ServerVersion: 1, Scopes: scopes, Payload: payload}, Values: vals}); err != nil {
			return err
		}
		_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "legacy", ClientCommitID: "c1", ActorID: "ev\xffil", CreatedAtMs: 1,
			Changes: []store.Change{{Table: "tasks", RowID: "t-old", Op: wire.OpUpsert, RowVersion: 1, Scopes: scopes, Payload: payload}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// The raw pull shows the COMMIT frame as sent.
	st, _ := alice.Subscription("tasks-p1")
	cursor := st.Cursor
	epoch := e.partitionState().LogEpoch
	m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: 3,
		Header: &wire.ReqHeader{ClientID: "raw-reader", SchemaVersion: 1, LogEpoch: &epoch},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Cursor: cursor,
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}}})), nil))
	var commit *wire.Commit
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *wire.Commit:
			commit = f
		case *wire.ErrorFrame:
			t.Fatalf("the pull over the stored commit failed in-band: %s (%s)", f.Code, f.Message)
		}
	}
	if commit == nil || commit.ActorID != "ev\uFFFDil" || len(commit.Changes) != 1 || commit.Changes[0].RowID != "t-old" {
		t.Fatalf("COMMIT frame %+v; want actor %q and the change of t-old", commit, "ev\uFFFDil")
	}
	syncQuiet(t, alice)
	if _, ok := alice.Rows("tasks")["t-old"]; !ok {
		t.Fatalf("the client did not receive the stored commit's row: %v", clientRows(t, alice, "tasks"))
	}
}

// Input one driver cannot store is refused at the protocol boundary, the
// same on both drivers, with a non-retryable code: NUL characters and
// identifiers over MaxIdentifierBytes in the client id, commit ids and
// subscriptions fail the request (HTTP 400); in an operation's row id or
// values they reject the commit (PUSH_RESULT rejected, sync.invalid_request,
// not retryable) and the batch goes on. Nothing is applied; afterwards the
// same client pushes a valid commit.
func TestE2EUnstorableInputRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "tasks-p1", "p1")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		long := strings.Repeat("x", syncgo.MaxIdentifierBytes+1)
		valid := e.upsertOp(t, taskRow("h1", "p1", "hostile"))
		pull := &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
		sub := func(id, value string) []*wire.Subscription {
			return []*wire.Subscription{{ID: id, Table: "tasks", Cursor: -1, Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{value}}}}}
		}
		req := func(clientID, commitID string, subs []*wire.Subscription) []byte {
			r := &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: commitID, Operations: []wire.Operation{valid}}}}
			if subs != nil {
				r.Pull, r.Subscriptions = pull, subs
			}
			return encodeRequest(t, r)
		}
		requestLevel := []struct {
			name string
			body []byte
			code string
		}{
			{"NUL in clientId", req("mallory\x00", hostileCommit, nil), syncerr.CodeInvalidClientID},
			{"overlong clientId", req(long, hostileCommit, nil), syncerr.CodeInvalidClientID},
			{"NUL in clientCommitId", req(hostileClient, "c\x00", nil), syncerr.CodeInvalidRequest},
			{"overlong clientCommitId", req(hostileClient, long, nil), syncerr.CodeInvalidRequest},
			{"NUL in a subscription id", req(hostileClient, hostileCommit, sub("s\x00", "p1")), syncerr.CodeInvalidSubscription},
			{"NUL in a requested scope value", req(hostileClient, hostileCommit, sub("s", "p\x001")), syncerr.CodeInvalidSubscription},
			{"overlong requested scope value", req(hostileClient, hostileCommit, sub("s", long)), syncerr.CodeInvalidSubscription},
		}
		before := e.snapshot(t, hostileClient, hostileCommit)
		for _, tc := range requestLevel {
			r := e.post(t, body(tc.body), nil)
			wantJSONError(t, r, http.StatusBadRequest, tc.code)
			if after := e.snapshot(t, hostileClient, hostileCommit); !after.equal(before) {
				t.Fatalf("%s changed the database:\nbefore %+v\nafter  %+v", tc.name, before, after)
			}
		}

		// Commit-level: each commit is rejected on its own, the batch
		// goes on, and the last (valid) commit applies.
		withID := func(id string, values map[string]any) wire.Operation {
			op := e.upsertOp(t, values)
			op.RowID = id
			return op
		}
		nulID, longID := "r\x00w", strings.Repeat("r", syncgo.MaxIdentifierBytes+1)
		commitLevel := []struct {
			name string
			op   wire.Operation
			code string
		}{
			{"NUL in rowId", withID(nulID, taskRow(nulID, "p1", "x")), syncerr.CodeInvalidRequest},
			{"overlong rowId", withID(longID, taskRow(longID, "p1", "x")), syncerr.CodeInvalidRequest},
			{"NUL in a delete's rowId", wire.Operation{Table: "tasks", RowID: "t\x001", Op: wire.OpDelete}, syncerr.CodeInvalidRequest},
			{"NUL in a text value", e.upsertOp(t, taskRow("v1", "p1", "ti\x00tle")), syncerr.CodeInvalidRequest},
			{"NUL escape in a json value", e.upsertOp(t, map[string]any{"id": "v2", "project_id": "p1", "title": "x", "done": false, "notes": map[string]any{"a": "\x00"}}), syncerr.CodeInvalidRequest},
			{"NUL in a scope value", e.upsertOp(t, taskRow("v3", "p\x001", "x")), syncerr.CodeInvalidRequest},
			{"overlong scope value", e.upsertOp(t, taskRow("v4", long, "x")), syncerr.CodeInvalidRequest},
			{"NUL in a table name", wire.Operation{Table: "tas\x00ks", RowID: "v5", Op: wire.OpDelete}, syncerr.CodeUnknownTable},
		}
		var commits []*wire.PushCommit
		for i, tc := range commitLevel {
			commits = append(commits, &wire.PushCommit{ClientCommitID: fmt.Sprintf("bad-%d", i), Operations: []wire.Operation{tc.op}})
		}
		commits = append(commits, &wire.PushCommit{ClientCommitID: "good", Operations: []wire.Operation{valid}})
		m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1, LogEpoch: &epoch}, Commits: commits})), nil))
		var results []*wire.PushResult
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *wire.PushResult:
				results = append(results, f)
			case *wire.ErrorFrame:
				t.Fatalf("in-band ERROR %s: %s", f.Code, f.Message)
			}
		}
		if len(results) != len(commits) {
			t.Fatalf("%d PUSH_RESULTs for %d commits", len(results), len(commits))
		}
		for i, tc := range commitLevel {
			pr := results[i]
			if pr.Status != wire.PushRejected || len(pr.Results) != 1 || pr.Results[0].Code != tc.code || pr.Results[0].Retryable {
				t.Errorf("%s: PUSH_RESULT %+v; want rejected with non-retryable %s", tc.name, pr, tc.code)
			}
		}
		if pr := results[len(results)-1]; pr.Status != wire.PushApplied {
			t.Fatalf("the valid commit after the rejected ones: %+v, want applied", pr)
		}
		if got := e.partitionState().MaxCommitSeq; got != before.maxSeq+1 {
			t.Fatalf("MaxCommitSeq %d, want %d: only the valid commit appends", got, before.maxSeq+1)
		}
		rows := e.serverRows("tasks")
		if len(rows) != 2 {
			t.Fatalf("server rows %v; want t1 and h1 only", rows)
		}
		syncQuiet(t, seed)
		if _, ok := seed.Rows("tasks")["h1"]; !ok {
			t.Fatal("a normal client did not receive the valid commit")
		}
	})
}

// A value too long for a declared index (Postgres refuses B-tree entries
// over about 2.7 KB; SQLite has no such limit) rejects its commit with
// sync.invalid_request on both drivers, instead of an HTTP 500 on one and
// a write on the other. A value within the index's share is stored.
func TestE2EValueOverIndexLimitRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		sch, err := schema.New(1).
			Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
				schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
			Scope("project:{project_id}").UniqueIndex("tasks_by_title", "title").
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Schema = sch })
		e.schema = sch
		rng := rand.New(rand.NewPCG(1, 2)) // incompressible text: Postgres cannot shrink the entry
		text := func(n int) string {
			b := make([]byte, n)
			for i := range b {
				b[i] = 'a' + byte(rng.IntN(26))
			}
			return string(b)
		}
		c := e.client("alice", sspclient.Options{})
		syncQuiet(t, c)
		epoch := e.partitionState().LogEpoch
		m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: 3,
			Header: &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{
				{ClientCommitID: "too-long", Operations: []wire.Operation{e.upsertOp(t, taskRow("i1", "p1", text(3000)))}},
				{ClientCommitID: "fits", Operations: []wire.Operation{e.upsertOp(t, taskRow("i2", "p1", text(1000)))}},
			}})), nil))
		var results []*wire.PushResult
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *wire.PushResult:
				results = append(results, f)
			case *wire.ErrorFrame:
				t.Fatalf("in-band ERROR %s: %s", f.Code, f.Message)
			}
		}
		if len(results) != 2 || results[0].Status != wire.PushRejected || len(results[0].Results) != 1 ||
			results[0].Results[0].Code != syncerr.CodeInvalidRequest || results[0].Results[0].Retryable {
			t.Fatalf("results %+v; want the 3000-byte title rejected with non-retryable sync.invalid_request", results)
		}
		if results[1].Status != wire.PushApplied {
			t.Fatalf("the 1000-byte title: %+v, want applied", results[1])
		}
		if rows := e.serverRows("tasks"); len(rows) != 1 {
			t.Fatalf("server rows %v; want only i2", rows)
		}
	})
}
