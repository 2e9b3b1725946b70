package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// testSchema has one table with a column of every type readRows renders.
const testSchema = `{"version": 1, "tables": [{"name": "tasks", "primaryKey": "id",
  "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "project_id", "type": "string", "nullable": false},
    {"name": "title", "type": "string", "nullable": true},
    {"name": "body", "type": "bytes", "nullable": true},
    {"name": "meta", "type": "json", "nullable": true},
    {"name": "n", "type": "integer", "nullable": true},
    {"name": "done", "type": "boolean", "nullable": true}],
  "scopes": [{"pattern": "project:{project_id}", "column": "project_id"}]}]}`

const startMs = int64(1750000000000)

// harness is a test's view of a conformance-mode server over real HTTP.
type harness struct {
	t   *testing.T
	url string
	srv *Harness
}

func startHarness(t *testing.T) *harness { return startHarnessOn(t, "sqlite") }

// eachDriver runs fn in a parallel subtest per storage driver, each with
// a harness of its own; the Postgres one runs on the test database
// (pgtest.URL: skipped without it, except under CI).
func eachDriver(t *testing.T, fn func(t *testing.T, h *harness)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			fn(t, startHarnessOn(t, driver))
		})
	}
}

func startHarnessOn(t *testing.T, driver string) *harness {
	t.Helper()
	var h *Harness
	if driver == "postgres" {
		var err error
		if h, err = NewPostgres(t.Context(), nil, pgtest.URL(t)); err != nil {
			t.Fatal(err)
		}
	} else {
		h = New(nil)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		if err := h.Close(); err != nil {
			t.Errorf("close harness: %v", err)
		}
	})
	return &harness{t: t, url: ts.URL, srv: h}
}

// do sends a JSON request and decodes the JSON answer into out (if not nil).
func (h *harness) do(method, path string, body any, out any) int {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			h.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// create makes an instance of testSchema and returns its id and mount.
func (h *harness) create() (id, mount string) {
	h.t.Helper()
	var out struct{ ID, Mount string }
	body := map[string]any{"schema": json.RawMessage(testSchema), "partition": "part-1", "nowMs": startMs,
		"limits": map[string]any{"maxOperationsPerRequest": 500, "inlineSegmentMaxBytes": 262144}}
	if code := h.do("POST", "/__conformance/instances", body, &out); code != http.StatusOK || out.ID == "" {
		h.t.Fatalf("create instance: %d %+v", code, out)
	}
	return out.ID, out.Mount
}

// call runs a control call that must succeed and decodes its result.
func (h *harness) call(id string, out any, method string, args ...any) {
	h.t.Helper()
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  string          `json:"error"`
	}
	if args == nil {
		args = []any{}
	}
	code := h.do("POST", "/__conformance/instances/"+id+"/call", map[string]any{"method": method, "args": args}, &resp)
	if code != http.StatusOK {
		h.t.Fatalf("%s: %d %s", method, code, resp.Error)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			h.t.Fatalf("%s result %s: %v", method, resp.Result, err)
		}
	}
}

// callFails runs a control call that must fail and returns its status and
// error text.
func (h *harness) callFails(id, method string, args ...any) (int, string) {
	h.t.Helper()
	var resp struct{ Error string }
	code := h.do("POST", "/__conformance/instances/"+id+"/call", map[string]any{"method": method, "args": args}, &resp)
	if code == http.StatusOK || resp.Error == "" {
		h.t.Fatalf("%s: got %d %q, want a failure with an error text", method, code, resp.Error)
	}
	return code, resp.Error
}

// sspClient is a minimal SSP2 client (wire version 3) for one actor and
// clientId against an instance mount.
type sspClient struct {
	t        *testing.T
	url      string
	actor    string
	clientID string
	epoch    *string
	codec    *wire.RowCodec
}

func (h *harness) client(mount, actor, clientID string) *sspClient {
	h.t.Helper()
	ir, err := schema.ParseJSON([]byte(testSchema))
	if err != nil {
		h.t.Fatal(err)
	}
	sc, err := schema.Compile(ir)
	if err != nil {
		h.t.Fatal(err)
	}
	tasks, _ := sc.Table("tasks")
	return &sspClient{t: h.t, url: h.url + mount, actor: actor, clientID: clientID, codec: tasks.RowCodec()}
}

// roundTrip sends req (its header filled in) and returns the response
// frames; it records the log epoch the server announces.
func (c *sspClient) roundTrip(req *wire.Request) []wire.Frame {
	c.t.Helper()
	req.Version = wire.Version3
	req.Header = &wire.ReqHeader{ClientID: c.clientID, SchemaVersion: 1, LogEpoch: c.epoch}
	body, err := req.MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	hreq, err := http.NewRequest("POST", c.url+"/sync", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hreq.Header.Set("Authorization", "Bearer "+c.actor)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("POST /sync: %d %s", resp.StatusCode, raw)
	}
	msg, err := wire.ReadMessage(resp.Body, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		c.t.Fatalf("decode response: %v", err)
	}
	if len(msg.Frames) > 0 {
		if h, ok := msg.Frames[0].(*wire.RespHeader); ok && h.LogEpoch != "" {
			epoch := h.LogEpoch
			c.epoch = &epoch
		}
	}
	return msg.Frames
}

// acquireEpoch runs the epoch acquisition round (§2.1): a pull with no
// subscriptions.
func (c *sspClient) acquireEpoch() {
	c.t.Helper()
	c.roundTrip(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows}})
	if c.epoch == nil {
		c.t.Fatal("the server announced no log epoch")
	}
}

// task is a full tasks row.
func task(id, project, title string, body []byte) []wire.Value {
	return []wire.Value{{Str: id}, {Str: project}, {Str: title}, {Bytes: body, Null: body == nil},
		{Str: `{"k":[1,2]}`}, {Int: 42}, {Bool: true}}
}

// push sends one commit upserting rows and returns its PUSH_RESULT.
func (c *sspClient) push(commitID string, rows ...[]wire.Value) *wire.PushResult {
	c.t.Helper()
	pc := &wire.PushCommit{ClientCommitID: commitID}
	for _, row := range rows {
		present := make([]bool, len(row))
		for i := range present {
			present[i] = true
		}
		payload, err := c.codec.AppendSparse(nil, wire.SparseRow{Present: present, Values: row})
		if err != nil {
			c.t.Fatal(err)
		}
		pc.Operations = append(pc.Operations, wire.Operation{Table: "tasks", RowID: row[0].Str, Op: wire.OpUpsert, Payload: payload})
	}
	for _, f := range c.roundTrip(&wire.Request{Commits: []*wire.PushCommit{pc}}) {
		if pr, ok := f.(*wire.PushResult); ok {
			return pr
		}
	}
	c.t.Fatal("no PUSH_RESULT in the response")
	return nil
}

// section is what one subscription section of a pull answered.
type section struct {
	start      *wire.SubStart
	rows       int // rows of inline segments
	commits    []*wire.Commit
	nextCursor int64
}

// pull pulls one tasks subscription of project p1 from cursor.
func (c *sspClient) pull(cursor int64) section {
	c.t.Helper()
	sub := &wire.Subscription{ID: "tasks", Table: "tasks", Cursor: cursor,
		Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}}
	var s section
	for _, f := range c.roundTrip(&wire.Request{Pull: &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{sub}}) {
		switch f := f.(type) {
		case *wire.SubStart:
			s.start = f
		case *wire.SegmentInline:
			seg, err := wire.DecodeSegment(f.Payload)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, b := range seg.Blocks {
				s.rows += len(b)
			}
		case *wire.Commit:
			s.commits = append(s.commits, f)
		case *wire.SubEnd:
			s.nextCursor = f.NextCursor
		case *wire.ErrorFrame:
			c.t.Fatalf("pull: ERROR frame %s: %s", f.Code, f.Message)
		}
	}
	if s.start == nil {
		c.t.Fatal("pull: no SUB_START")
	}
	return s
}

// databasesGone returns a check that reports what is left of the
// databases instance id has made so far (its SQLite files or its
// Postgres schemas, backups included), or "" when nothing is.
func (h *harness) databasesGone(id string) func() string {
	h.t.Helper()
	in := h.srv.lookup(id)
	if in == nil {
		h.t.Fatalf("no instance %q", id)
	}
	switch d := in.dbs.(type) {
	case *sqliteDatabases:
		dir := d.dir
		return func() string {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				return fmt.Sprintf("directory %s (stat: %v)", dir, err)
			}
			return ""
		}
	case *pgDatabases:
		prefix := d.prefix
		if len(d.schemas) < 3 {
			h.t.Fatalf("instance %s made schemas %v, want its first database, a backup and a restored one", id, d.schemas)
		}
		return func() string {
			var left []string
			rows, err := h.srv.admin.Query(h.t.Context(), "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY 1", prefix)
			if err == nil {
				left, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				h.t.Fatal(err)
			}
			return strings.Join(left, ", ")
		}
	}
	h.t.Fatalf("instance %s: databases of type %T", id, in.dbs)
	return nil
}
