package syncgo_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// hostileClient and hostileCommit identify the writes of the hostile
// requests, so that the tests can prove none of them was recorded.
const (
	hostileClient = "mallory-device"
	hostileCommit = "hostile-commit"
)

// Hostile input is refused before anything is written: every request
// below is answered with its error (HTTP-level JSON, or the header-only
// epoch-reset and schema-floor responses), and afterwards the database is
// unchanged: the partition counters, the rows, no client record and no
// journaled commit for the hostile client.
func TestE2EHostileInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.MaxRequestBytes = 64 << 10
			c.Limits.MaxOperationsPerRequest = 10
		})
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "tasks-p1", "p1")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch

		pull := &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
		sub := &wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
		header := func(v int32, ep *string) *wire.ReqHeader {
			return &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: v, LogEpoch: ep}
		}
		commit := func(ops ...wire.Operation) *wire.PushCommit {
			return &wire.PushCommit{ClientCommitID: hostileCommit, Operations: ops}
		}
		write := e.upsertOp(t, taskRow("h1", "p1", "hostile"))
		valid := encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(write)}})
		end := valid[len(valid)-5:]
		spans := frameSpans(valid)
		reqHeader := valid[spans[0].start:spans[0].end]
		many := make([]wire.Operation, 11)
		for i := range many {
			many[i] = e.upsertOp(t, taskRow(fmt.Sprintf("m%d", i), "p1", "many"))
		}
		big := e.upsertOp(t, taskRow("big", "p1", string(bytes.Repeat([]byte("x"), 80<<10))))
		stale := "an-epoch-from-another-log"

		cases := []struct {
			name   string
			body   []byte
			hdr    map[string]string
			status int
			code   string
			check  func(t *testing.T, m *wire.Message) // for 200 answers
		}{
			{name: "wrong content type", body: valid, hdr: map[string]string{"Content-Type": "application/octet-stream"},
				status: http.StatusUnsupportedMediaType, code: syncerr.CodeInvalidRequest},
			{name: "missing authorization", body: valid, hdr: map[string]string{"Authorization": ""},
				status: http.StatusUnauthorized, code: syncerr.CodeAuthRequired},
			{name: "unsupported content encoding", body: valid, hdr: map[string]string{"Content-Encoding": "br"},
				status: http.StatusUnsupportedMediaType, code: syncerr.CodeInvalidRequest},
			{name: "truncated body", body: valid[:len(valid)/2], status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "missing END", body: valid[:len(valid)-5], status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "bad magic", body: append([]byte("SSQ2"), valid[4:]...), status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "unknown wire version", body: append([]byte{'S', 'S', 'P', '2', 9, 0}, valid[6:]...),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "non-zero flags", body: append(append([]byte{}, valid[:7]...), append([]byte{1}, valid[8:]...)...),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "response kind", body: append(append([]byte{}, valid[:6]...), append([]byte{byte(wire.KindResponse)}, valid[7:]...)...),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "trailing bytes in a frame",
				body:   concat(valid[:8], frame(wire.FrameReqHeader, append(append([]byte{}, reqHeader[5:]...), 0)), valid[spans[0].end:]),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "response frame in a request", body: concat(valid[:spans[1].start], frame(wire.FrameSubStart, nil), valid[spans[1].start:]),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "frame length past the body", body: concat(valid[:spans[1].start], []byte{byte(wire.FramePushCommit), 0xff, 0xff, 0, 0}),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "frame over the frame cap", body: concat(valid[:spans[1].start], []byte{byte(wire.FramePushCommit), 0xff, 0xff, 0xff, 0xff}),
				status: http.StatusRequestEntityTooLarge, code: syncerr.CodeInvalidRequest},
			{name: "bytes after END", body: append(append([]byte{}, valid...), 0), status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "no push and no pull", body: concat(valid[:spans[1].start], end), status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "empty commit", body: concat(valid[:spans[1].start], frame(wire.FramePushCommit, emptyCommitPayload()), end),
				status: http.StatusBadRequest, code: syncerr.CodeEmptyCommit},
			{name: "body over the size cap",
				body:   encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(big)}}),
				status: http.StatusRequestEntityTooLarge, code: syncerr.CodeInvalidRequest},
			{name: "too many operations",
				body:   encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(many...)}}),
				status: http.StatusBadRequest, code: syncerr.CodeTooManyOperations},
			{name: "push during epoch acquisition",
				body:   concat(valid[:8], frame(wire.FrameReqHeader, reqHeaderPayload(hostileClient, 1, nil)), valid[spans[1].start:]),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "reserved client id",
				body: encodeRequest(t, &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: `["remote-command","x"]`,
					SchemaVersion: 1, LogEpoch: &epoch}, Commits: []*wire.PushCommit{commit(write)}}),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidClientID},
			{name: "duplicate subscription ids",
				body:   encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(write)}, Pull: pull, Subscriptions: []*wire.Subscription{sub, sub}}),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidSubscription},
			{name: "requested wildcard",
				body: encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(write)}, Pull: pull,
					Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"*"}}}, Cursor: -1}}}),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidSubscription},
			{name: "subscription to an unknown table",
				body: encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(write)}, Pull: pull,
					Subscriptions: []*wire.Subscription{{ID: "s", Table: "nope", Scopes: sub.Scopes, Cursor: -1}}}),
				status: http.StatusBadRequest, code: syncerr.CodeUnknownTable},
			{name: "pull accepting no rows segments",
				body:   encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &epoch), Commits: []*wire.PushCommit{commit(write)}, Pull: &wire.PullHeader{Accept: wire.AcceptSQLite}, Subscriptions: []*wire.Subscription{sub}}),
				status: http.StatusBadRequest, code: syncerr.CodeInvalidRequest},
			{name: "epoch mismatch", status: http.StatusOK,
				body: encodeRequest(t, &wire.Request{Version: 3, Header: header(1, &stale), Commits: []*wire.PushCommit{commit(write)}, Pull: pull, Subscriptions: []*wire.Subscription{sub}}),
				check: func(t *testing.T, m *wire.Message) {
					h, ok := m.Frames[0].(*wire.RespHeader)
					if len(m.Frames) != 1 || !ok || !h.ResetRequired || h.LogEpoch != epoch {
						t.Fatalf("epoch mismatch answered %d frames, header %+v; want only RESP_HEADER with resetRequired and the live epoch", len(m.Frames), m.Frames[0])
					}
				}},
			{name: "unserved schema version", status: http.StatusOK,
				body: encodeRequest(t, &wire.Request{Version: 3, Header: header(7, &epoch), Commits: []*wire.PushCommit{commit(write)}, Pull: pull, Subscriptions: []*wire.Subscription{sub}}),
				check: func(t *testing.T, m *wire.Message) {
					h, ok := m.Frames[0].(*wire.RespHeader)
					if len(m.Frames) != 1 || !ok || h.RequiredSchemaVersion == nil || *h.RequiredSchemaVersion != 1 ||
						h.LatestSchemaVersion == nil || *h.LatestSchemaVersion != 1 {
						t.Fatalf("unserved schema answered %d frames, header %+v; want only the schema-floor RESP_HEADER (required 1, latest 1)", len(m.Frames), m.Frames[0])
					}
				}},
		}
		before := e.snapshot(t, hostileClient, hostileCommit)
		for _, tc := range cases {
			r := e.post(t, body(tc.body), tc.hdr)
			if tc.check != nil {
				tc.check(t, decodeResponse(t, r))
			} else {
				if r.status != tc.status {
					t.Fatalf("%s: HTTP %d %s; want %d", tc.name, r.status, r.body, tc.status)
				}
				wantJSONError(t, r, tc.status, tc.code)
			}
			if after := e.snapshot(t, hostileClient, hostileCommit); !after.equal(before) {
				t.Fatalf("%s changed the database:\nbefore %+v\nafter  %+v", tc.name, before, after)
			}
		}

		// Control: the same write, valid and gzip-compressed, applies.
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(valid)
		_ = zw.Close()
		m := decodeResponse(t, e.post(t, body(gz.Bytes()), map[string]string{"Content-Encoding": "gzip"}))
		if pr, ok := m.Frames[1].(*wire.PushResult); !ok || pr.Status != wire.PushApplied {
			t.Fatalf("the valid gzip request answered %+v, want applied", m.Frames[1])
		}
		if after := e.snapshot(t, hostileClient, hostileCommit); after.maxSeq != before.maxSeq+1 || !after.pushResultJournal {
			t.Fatalf("the valid control request did not apply: %+v", after)
		}
	})
}

// The client surfaces the refusals it can meet: too many operations as an
// HTTP error, an unserved schema version as a *SchemaFloorError.
func TestE2EClientRefusals(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Limits.MaxOperationsPerRequest = 10 })
		c := e.client("alice", sspclient.Options{MaxOperationsPerRequest: 100})
		syncQuiet(t, c)
		if _, err := c.Mutate(func(tx *sspclient.Tx) error {
			for i := range 11 {
				if err := tx.Upsert("tasks", taskRow(fmt.Sprintf("t%d", i), "p1", "x")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Sync(t.Context())
		wantHTTPError(t, "11 operations over a cap of 10", http.StatusBadRequest, syncerr.CodeTooManyOperations, err)
		if c.Pending() != 1 || e.partitionState().MaxCommitSeq != 0 {
			t.Fatalf("after the refusal: %d pending, MaxCommitSeq %d; want the commit kept and nothing applied", c.Pending(), e.partitionState().MaxCommitSeq)
		}

		newer, err := sspclient.New(e.url, "alice", e2eSchema(t, 2), sspclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = newer.Sync(t.Context())
		var floor *sspclient.SchemaFloorError
		if !errors.As(err, &floor) || floor.RequiredSchema != 1 {
			t.Fatalf("a schema-2 client against a schema-1 server: %v; want a schema-floor error requiring 1", err)
		}
	})
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// reqHeaderPayload encodes a version 3 REQ_HEADER payload by hand.
func reqHeaderPayload(clientID string, schemaVersion int32, epoch *string) []byte {
	b := appendStr(nil, clientID)
	b = append(b, byte(schemaVersion), byte(schemaVersion>>8), byte(schemaVersion>>16), byte(schemaVersion>>24))
	if epoch == nil {
		return append(b, 0)
	}
	return appendStr(append(b, 1), *epoch)
}

// emptyCommitPayload is a PUSH_COMMIT payload with zero operations.
func emptyCommitPayload() []byte {
	return append(appendStr(nil, hostileCommit), 0, 0, 0, 0)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	return append(append(b, byte(n), byte(n>>8), byte(n>>16), byte(n>>24)), s...)
}
