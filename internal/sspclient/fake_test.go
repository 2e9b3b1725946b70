package sspclient_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// fakeServer answers POST /sync with the frames a test scripts for each
// request, and GET /segments/{id} from a map, so that the client's
// handling of exact responses can be checked without a real server.
type fakeServer struct {
	t       testing.TB
	srv     *httptest.Server
	respond func(req *wire.Request) []wire.Frame
	// cutTail, when positive, drops that many bytes from the end of the
	// next /sync body.
	cutTail int

	mu       sync.Mutex
	requests []*wire.Request
	segments map[string][]byte
	// scopesHeader is the X-Syncular-Scopes of the last download.
	scopesHeader string
}

func newFakeServer(t testing.TB, respond func(req *wire.Request) []wire.Frame) *fakeServer {
	f := &fakeServer{t: t, respond: respond, segments: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sync", f.sync)
	mux.HandleFunc("GET /segments/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.segments[r.PathValue("id")]
		f.scopesHeader = r.Header.Get("X-Syncular-Scopes")
		f.mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code":"sync.not_found","message":"segment not found","category":"not-found","retryable":false,"recommendedAction":"forceResync"}`))
			return
		}
		_, _ = w.Write(b)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) sync(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	req, err := wire.DecodeRequest(b, wire.DecoderOptions{})
	if err != nil {
		f.t.Errorf("fake server: request does not decode: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	cut := f.cutTail
	f.cutTail = 0
	f.mu.Unlock()
	var buf bytes.Buffer
	enc, err := wire.NewEncoder(&buf, wire.KindResponse, req.Version)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, fr := range f.respond(req) {
		if err := enc.Encode(fr); err != nil {
			f.t.Errorf("fake server: encode %T: %v", fr, err)
		}
	}
	if err := enc.Close(); err != nil {
		f.t.Errorf("fake server: close: %v", err)
	}
	out := buf.Bytes()
	if cut > 0 {
		out = out[:len(out)-cut]
	}
	w.Header().Set("Content-Type", sspclient.ContentType)
	_, _ = w.Write(out)
}

// lastRequest returns the most recent request.
func (f *fakeServer) lastRequest() *wire.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

// publish stores a segment under the content address of b, or of idOf
// when given (a tampered segment), and returns the id.
func (f *fakeServer) publish(b []byte, idOf ...[]byte) string {
	key := b
	if len(idOf) > 0 {
		key = idOf[0]
	}
	sum := sha256.Sum256(key)
	id := "sha256:" + hex.EncodeToString(sum[:])
	f.mu.Lock()
	f.segments[id] = b
	f.mu.Unlock()
	return id
}

// request returns the i-th request and the number of requests.
func (f *fakeServer) request(i int) (*wire.Request, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i < 0 || i >= len(f.requests) {
		return nil, len(f.requests)
	}
	return f.requests[i], len(f.requests)
}

// fakeSchema is a one-table schema: notes(id, project, body) scoped by
// project.
func fakeSchema(t testing.TB) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("notes", "id", schema.String("id"), schema.String("project"), schema.String("body").Null()).
		Scope("project:{project}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// note encodes a full notes row.
func note(t testing.TB, s *schema.Compiled, id, project, body string) []byte {
	t.Helper()
	tbl, _ := s.Table("notes")
	b, err := tbl.RowCodec().AppendRow(nil, []wire.Value{{Str: id}, {Str: project}, {Str: body}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// segmentOf encodes a rows segment of notes rows at version 1.
func segmentOf(t testing.TB, s *schema.Compiled, rows ...[]byte) []byte {
	t.Helper()
	tbl, _ := s.Table("notes")
	var buf bytes.Buffer
	sw, err := wire.NewSegmentWriter(&buf, wire.SegmentHeader{Table: "notes", SchemaVersion: s.Version(), Columns: tbl.WireColumns()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := sw.WriteRow(1, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// scopes is a one-key scope map.
func scopes(key string, values ...string) wire.ScopeMap {
	return wire.ScopeMap{{Key: key, Values: values}}
}
