package syncgo_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"testing"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// withWireVersion returns a copy of an encoded message with another
// wireVersion in its envelope.
func withWireVersion(b []byte, v uint16) []byte {
	out := append([]byte(nil), b...)
	binary.LittleEndian.PutUint16(out[4:6], v)
	return out
}

// The wire version is negotiated by the request envelope alone: versions
// 1 to 3 are answered in their own version (a version 1 header without a
// log epoch), every other one (0, 4, 99, 0xffff, "negative" -1) is
// sync.invalid_request with HTTP 400 and writes nothing; a version 1 or 2
// push whose payload is a version 3 sparse row is refused whole, not half
// applied.
func TestE2EWireVersionNegotiation(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("alice", sspclient.Options{})
		mustSubscribe(t, seed, "tasks-p1", "p1")
		mustUpsert(t, seed, taskRow("t1", "p1", "seed"))
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		pull := &wire.PullHeader{Accept: wire.AcceptInlineRows | wire.AcceptExternalRows}
		sub := &wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
		valid := encodeRequest(t, &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: hostileCommit, Operations: []wire.Operation{e.upsertOp(t, taskRow("h1", "p1", "x"))}}}})

		before := e.snapshot(t, hostileClient, hostileCommit)
		for _, v := range []uint16{0, 4, 99, 0xffff} {
			r := e.post(t, body(withWireVersion(valid, v)), nil)
			wantJSONError(t, r, http.StatusBadRequest, syncerr.CodeInvalidRequest)
			if after := e.snapshot(t, hostileClient, hostileCommit); !after.equal(before) {
				t.Fatalf("wire version %d changed the database:\nbefore %+v\nafter  %+v", v, before, after)
			}
		}

		// A sparse (version 3) payload of some columns, sent as version 1
		// and 2, where a payload is the full row.
		partial := e.upsertOp(t, map[string]any{"id": "t1", "title": "partial"})
		for _, v := range []uint16{wire.Version1, wire.Version2} {
			h := &wire.ReqHeader{ClientID: hostileClient, SchemaVersion: 1}
			if v >= wire.Version2 {
				h.LogEpoch = &epoch
			}
			m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: v, Header: h,
				Commits: []*wire.PushCommit{{ClientCommitID: hostileCommit, Operations: []wire.Operation{partial}}}})), nil))
			if m.Version != v {
				t.Fatalf("a version %d push answered in version %d", v, m.Version)
			}
			pr, ok := m.Frames[1].(*wire.PushResult)
			if !ok || pr.Status != wire.PushRejected || len(pr.Results) != 1 || pr.Results[0].Code != syncerr.CodeInvalidRequest {
				t.Fatalf("version %d push of a sparse payload answered %+v; want rejected, sync.invalid_request", v, m.Frames[1])
			}
			if after := e.snapshot(t, hostileClient, hostileCommit); after.maxSeq != before.maxSeq || after.rows["t1"] != before.rows["t1"] {
				t.Fatalf("version %d push of a sparse payload changed the log or the row:\nbefore %+v\nafter  %+v", v, before, after)
			}

			// A pull of the same version is answered in it: a version 1
			// header carries no log epoch, a version 2 one the live one.
			m = decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: v, Header: h, Pull: pull,
				Subscriptions: []*wire.Subscription{sub}})), nil))
			rh, ok := m.Frames[0].(*wire.RespHeader)
			if m.Version != v || !ok || rh.ResetRequired || (v == wire.Version1) != (rh.LogEpoch == "") || (v == wire.Version2 && rh.LogEpoch != epoch) {
				t.Fatalf("version %d pull answered version %d, header %+v", v, m.Version, m.Frames[0])
			}
		}
	})
}

// A socket round whose envelope names a wire version the server does not
// speak closes the socket as a protocol error (§8.7 failures: an invalid
// request header is connection-fatal); versions 1 to 3 are served.
func TestRealtimeUnsupportedWireVersionCloses(t *testing.T) {
	e := newRTEnv(t)
	a := e.peer("alice", "a1")
	a.acquireEpoch()
	req := a.encode(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
	for _, v := range []uint16{0, 4, 99, 0xffff} {
		s := e.dial("alice", "a1")
		s.hello()
		s.sendRound(withWireVersion(req, v))
		s.wantClose(ws.StatusProtocolError)
	}
	for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
		s := e.dial("alice", "a1")
		s.hello()
		h := &wire.ReqHeader{ClientID: "a1", SchemaVersion: 1}
		if v >= wire.Version2 {
			h.LogEpoch = a.epoch
		}
		m := s.round(a, &wire.Request{Version: v, Header: h, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
			Subscriptions: []*wire.Subscription{rtSub("s1", -1, "p1")}})
		if m.Version != v {
			t.Fatalf("a version %d socket round answered in version %d", v, m.Version)
		}
		_ = s.nc.Close()
	}
}

// A client of wire version 1 or 2 that pulled over HTTP gets its deltas
// in its own version (a version 1 header without a log epoch), and its
// acks move the stored cursor without changing the stored wire version
// (§8.2: an ack preserves the registration fields).
func TestRealtimeOldWireVersionDeltas(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantEnv(t, d.open(t), &rtGrants{})
		bob := e.peer("bob", "b1")
		bob.push("c0", rtTask{id: "t0", project: "p1"})
		for _, v := range []uint16{wire.Version1, wire.Version2} {
			id := fmt.Sprintf("old-v%d", v)
			a := e.peer("alice", id)
			h := &wire.ReqHeader{ClientID: id, SchemaVersion: 1}
			if v == wire.Version2 {
				a.post(&wire.Request{Version: v, Header: h, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
				h.LogEpoch = a.epoch
			}
			cur := rtCursors(t, a.post(&wire.Request{Version: v, Header: h, Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
				Subscriptions: []*wire.Subscription{rtSub("s", -1, "p1")}}))["s"]
			if cur < 1 {
				t.Fatalf("v%d: pull cursor %d", v, cur)
			}
			s := e.dial("alice", id)
			s.hello()
			seq := bob.push(fmt.Sprintf("c-%d", v), rtTask{id: fmt.Sprintf("t-%d", v), project: "p1"})
			m := s.delta()
			rh, ok := m.Frames[0].(*wire.RespHeader)
			if m.Version != v || !ok || (v == wire.Version1) != (rh.LogEpoch == "") || (v == wire.Version2 && rh.LogEpoch != *a.epoch) {
				t.Fatalf("v%d client's delta: version %d, header %+v", v, m.Version, m.Frames[0])
			}
			if _, next := rtDeltaRows(m); next["s"] != seq {
				t.Fatalf("v%d client's delta moves s to %v, want %d", v, next, seq)
			}
			s.ack(seq)
			eventually(t, "the ack stored", func() bool {
				rec, err := e.store.Client(context.Background(), rtPartition, id)
				return err == nil && rec.Cursor == seq
			})
			if rec, err := e.store.Client(context.Background(), rtPartition, id); err != nil || rec.WireVersion != v {
				t.Fatalf("v%d client's record after an ack: %+v, %v", v, rec, err)
			}
			_ = s.nc.Close()
		}
	})
}

// A declared reference (§6.11 of wire version 3) that rejects a write of a
// wire version 1 or 2 client answers the code of its closed catalog for a
// server-side foreign-key failure, sync.constraint_violation (version 2
// §10.2, §10.3: a sync. code outside it is neither a protocol code the
// client knows nor a host code); a version 3 client gets
// sync.reference_violation. The details are the same.
func TestE2EReferenceViolationOldWireVersions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		sc, err := schema.New(1).
			Table("lists", "id", schema.String("id"), schema.String("project_id")).Scope("project:{project_id}").
			Table("items", "id", schema.String("id"), schema.String("project_id"), schema.String("list_id"), schema.String("title")).
			Scope("project:{project_id}").Reference("list_id", "lists", "RESTRICT").Index("items_list", "list_id").
			Compile()
		if err != nil {
			t.Fatal(err)
		}
		e := newE2EEnv(t, d, func(c *syncgo.Config) { c.Schema = sc })
		e.schema = sc
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			c := e.client("alice", sspclient.Options{WireVersion: v})
			syncQuiet(t, c)
			id, err := c.Upsert("items", map[string]any{"id": fmt.Sprintf("i%d", v), "project_id": "p1", "list_id": "absent", "title": "x"})
			if err != nil {
				t.Fatal(err)
			}
			o := pushed(t, syncQuiet(t, c)[0], id)
			want := syncerr.CodeConstraintViolation
			if v == wire.Version3 {
				want = syncerr.CodeReferenceViolation
			}
			if o.Status != wire.PushRejected || o.ErrorCode() != want || len(o.Details) != 1 {
				t.Errorf("v%d: a write to an absent parent answered %s, %d details; want rejected %s with its details", v, statusOf(o), len(o.Details), want)
			}
		}
	})
}

// fullRowOp returns a tasks upsert whose payload is a full row, as wire
// versions 1 and 2 carry it.
func (e *e2eEnv) fullRowOp(t *testing.T, values map[string]any, base *int64) wire.Operation {
	t.Helper()
	tbl, _ := e.schema.Table("tasks")
	vals := make([]wire.Value, len(tbl.Columns()))
	for i, c := range tbl.Columns() {
		v, err := sspclient.WireValue(c.Type, values[c.Name])
		if err != nil {
			t.Fatal(err)
		}
		vals[i] = v
	}
	payload, err := tbl.RowCodec().AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Operation{Table: "tasks", RowID: values["id"].(string), Op: wire.OpUpsert, BaseVersion: base, Payload: payload}
}

// A push result is replayed from the journal in the wire version of the
// retry, not of the request that recorded it: a commit rejected with
// sync.row_deleted (new in wire version 3) and retried by the same client
// at version 1 or 2 gets a code of their closed catalog (§10.2 of version
// 2: sync.row_missing, the not-found code of an upsert whose row is
// absent), and at version 3 again sync.row_deleted. The reverse holds
// too: a conflict recorded from a version 2 push and retried at version 3
// carries its conflictColumns, and at version 2 none.
func TestE2EPushReplayAcrossWireVersions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		a := e.client("alice", sspclient.Options{})
		mustUpsert(t, a, taskRow("t1", "p1", "doomed"))
		mustUpsert(t, a, taskRow("t2", "p1", "kept"))
		syncQuiet(t, a)
		if _, err := a.Delete("tasks", "t1"); err != nil {
			t.Fatal(err)
		}
		mustUpsert(t, a, taskRow("t2", "p1", "kept, edited"))
		syncQuiet(t, a)
		epoch := e.partitionState().LogEpoch

		push := func(v uint16, commit string, op wire.Operation) *wire.PushResult {
			t.Helper()
			m := decodeResponse(t, e.post(t, body(encodeRequest(t, &wire.Request{Version: v, Header: oldHeader(v, "replayer", epoch),
				Commits: []*wire.PushCommit{{ClientCommitID: commit, Operations: []wire.Operation{op}}}})), nil))
			if m.Version != v || len(m.Frames) < 2 {
				t.Fatalf("a version %d push answered version %d, %d frames", v, m.Version, len(m.Frames))
			}
			pr, ok := m.Frames[1].(*wire.PushResult)
			if !ok || pr.ClientCommitID != commit || pr.Status != wire.PushRejected || len(pr.Results) != 1 {
				t.Fatalf("a version %d push of %s answered %+v; want one rejected result", v, commit, m.Frames[1])
			}
			return pr
		}

		row := taskRow("t1", "p1", "did not see the delete")
		if r := push(wire.Version3, "c-deleted", e.upsertOp(t, row)).Results[0]; r.Code != syncerr.CodeRowDeleted {
			t.Fatalf("unversioned upsert over a delete: %+v; want %s", r, syncerr.CodeRowDeleted)
		}
		for _, v := range []uint16{wire.Version1, wire.Version2, wire.Version3} {
			want := syncerr.CodeRowMissing
			if v == wire.Version3 {
				want = syncerr.CodeRowDeleted
			}
			if r := push(v, "c-deleted", e.fullRowOp(t, row, nil)).Results[0]; r.Status != wire.OpError || r.Code != want || r.Retryable {
				t.Errorf("v%d: the replay of a sync.row_deleted rejection answered %+v; want error %s", v, r, want)
			}
		}

		stale := int64(1)
		op := e.fullRowOp(t, taskRow("t2", "p1", "stale edit"), &stale)
		if r := push(wire.Version2, "c-conflict", op).Results[0]; r.Status != wire.OpConflict || r.ConflictColumns != nil {
			t.Fatalf("a version 2 stale edit answered %+v; want a conflict without conflictColumns", r)
		}
		if r := push(wire.Version3, "c-conflict", op).Results[0]; r.Status != wire.OpConflict || r.Code != syncerr.CodeVersionConflict || len(r.ConflictColumns) == 0 {
			t.Errorf("the version 3 replay of a version 2 conflict answered %+v; want a conflict with conflictColumns", r)
		}
		if r := push(wire.Version2, "c-conflict", op).Results[0]; r.Status != wire.OpConflict || r.ConflictColumns != nil || r.ServerVersion != 2 {
			t.Errorf("the version 2 replay of a conflict answered %+v; want a conflict at server version 2 without conflictColumns", r)
		}
	})
}
