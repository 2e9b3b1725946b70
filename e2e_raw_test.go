package syncgo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Raw-request helpers for the tests that speak to the server without the
// client: hand-built messages, the HTTP exchange, and the database
// snapshot that proves a refused request wrote nothing.

// encodeRequest encodes a request message.
func encodeRequest(t *testing.T, req *wire.Request) []byte {
	t.Helper()
	b, err := req.MarshalBinary()
	if err != nil {
		t.Fatalf("encode request: %v", err)
	}
	return b
}

// frame returns one encoded frame.
func frame(typ wire.FrameType, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{byte(typ)}, uint32(len(payload)))
	return append(b, payload...)
}

// upsertOp returns a version 3 upsert of a tasks row (a sparse row of the
// columns given).
func (e *e2eEnv) upsertOp(t *testing.T, values map[string]any) wire.Operation {
	t.Helper()
	tbl, _ := e.schema.Table("tasks")
	row := wire.SparseRow{Present: make([]bool, len(tbl.Columns())), Values: make([]wire.Value, len(tbl.Columns()))}
	for name, v := range values {
		i, _ := tbl.ColumnIndex(name)
		wv, err := sspclient.WireValue(tbl.Columns()[i].Type, v)
		if err != nil {
			t.Fatal(err)
		}
		row.Present[i], row.Values[i] = true, wv
	}
	payload, err := tbl.RowCodec().AppendSparse(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Operation{Table: "tasks", RowID: values["id"].(string), Op: wire.OpUpsert, Payload: payload}
}

// rawResponse is a server answer read whole.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
	close  bool // the server announced Connection: close
}

// post sends a body to POST /sync with the SSP2 content type and alice's
// token unless hdr overrides them (an empty value deletes a header).
func (e *e2eEnv) post(t *testing.T, body io.Reader, hdr map[string]string) rawResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/sync", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", sspclient.ContentType)
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Accept-Encoding", "identity")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /sync: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b, close: resp.Close}
}

// wantJSONError checks an HTTP-level error answer: the status, the §10.1
// JSON shape and its code.
func wantJSONError(t *testing.T, r rawResponse, status int, code string) {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q %s; want %d application/json %s", r.status, r.header.Get("Content-Type"), r.body, status, code)
	}
	pe, err := syncerr.ParseJSON(r.body)
	if err != nil || pe.Code != code {
		t.Fatalf("error body %s; want code %s", r.body, code)
	}
}

// decodeResponse decodes a 200 answer's SSP2 body.
func decodeResponse(t *testing.T, r rawResponse) *wire.Message {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("HTTP %d %s; want 200", r.status, r.body)
	}
	m, err := wire.DecodeMessage(r.body, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		t.Fatalf("decode response: %v", err)
	}
	return m
}

// dbSnapshot is what a refused request must leave unchanged.
type dbSnapshot struct {
	epoch             string
	maxSeq, horizon   int64
	rows              map[string]string
	clientRecord      bool
	pushResultJournal bool
}

// snapshot reads the partition counters, the rows, and whether the
// hostile client id has a client record or a journaled commit.
func (e *e2eEnv) snapshot(t *testing.T, clientID, commitID string) dbSnapshot {
	t.Helper()
	ctx := context.Background()
	p := e.partitionState()
	s := dbSnapshot{epoch: p.LogEpoch, maxSeq: p.MaxCommitSeq, horizon: p.HorizonSeq, rows: e.serverRows("tasks")}
	if _, err := e.store.Client(ctx, e2ePartition, clientID); err == nil {
		s.clientRecord = true
	} else if !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := e.store.PushResult(ctx, e2ePartition, clientID, commitID); err == nil {
		s.pushResultJournal = true
	} else if !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return s
}

func (s dbSnapshot) equal(o dbSnapshot) bool {
	return s.epoch == o.epoch && s.maxSeq == o.maxSeq && s.horizon == o.horizon && maps.Equal(s.rows, o.rows) &&
		s.clientRecord == o.clientRecord && s.pushResultJournal == o.pushResultJournal
}

// body returns a reader over b.
func body(b []byte) io.Reader { return bytes.NewReader(b) }
