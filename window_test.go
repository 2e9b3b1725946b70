package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/wire"
)

// windowSchemas returns version 1 of a tasks table and version 2, which
// appends a nullable column.
func windowSchemas(t *testing.T) (v1, v2 *schema.Compiled) {
	t.Helper()
	build := func(version int32, extra ...schema.Column) *schema.Compiled {
		cols := append([]schema.Column{schema.String("id"), schema.String("project_id"), schema.String("title")}, extra...)
		c, err := schema.New(version).Table("tasks", "id", cols...).Scope("project:{project_id}").Compile()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return build(1), build(2, schema.Integer("priority").Null())
}

type windowEnv struct {
	t   *testing.T
	url string
}

func newWindowServer(t *testing.T, current *schema.Compiled, window ...*schema.Compiled) *windowEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(t.TempDir(), "w.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := syncgo.New(syncgo.Config{
		Store: st, Schema: current, SchemaWindow: window,
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				return syncgo.Auth{}, errors.New("no token")
			}
			return syncgo.Auth{ActorID: a, Partition: "p"}, nil
		},
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		},
		RetentionInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &windowEnv{t: t, url: hs.URL}
}

func (e *windowEnv) round(req *wire.Request) *wire.Message {
	e.t.Helper()
	body, err := req.MarshalBinary()
	if err != nil {
		e.t.Fatal(err)
	}
	hr, _ := http.NewRequest("POST", e.url+"/sync", bytes.NewReader(body))
	hr.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hr.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m, err := wire.DecodeMessage(b, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *windowEnv) epoch(clientID string, version int32) string {
	m := e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: clientID, SchemaVersion: version},
		Pull: &wire.PullHeader{Accept: 3}})
	return m.Frames[0].(*wire.RespHeader).LogEpoch
}

func sparse(t *testing.T, c *schema.Compiled, vals ...wire.Value) []byte {
	t.Helper()
	tbl, _ := c.Table("tasks")
	present := make([]bool, len(vals))
	for i := range present {
		present[i] = true
	}
	b, err := tbl.RowCodec().AppendSparse(nil, wire.SparseRow{Present: present, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func framesOf[T wire.Frame](m *wire.Message) []T {
	var out []T
	for _, f := range m.Frames {
		if x, ok := f.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func TestSchemaWindow(t *testing.T) {
	v1, v2 := windowSchemas(t)
	e := newWindowServer(t, v2, v1)
	t1, _ := v1.Table("tasks")
	t2, _ := v2.Table("tasks")

	// A version-0 client is below the floor: required 1, latest 2.
	floor := e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "old", SchemaVersion: 7},
		Pull: &wire.PullHeader{Accept: 3}}).Frames[0].(*wire.RespHeader)
	if floor.RequiredSchemaVersion == nil || *floor.RequiredSchemaVersion != 1 || *floor.LatestSchemaVersion != 2 {
		t.Fatalf("floor response = %+v, want required 1, latest 2", floor)
	}

	// A version-1 client inserts in its own layout; the row is stored in
	// the current one with the appended column NULL.
	ep := e.epoch("c1", 1)
	sub := &wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	m := e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &ep},
		Commits: []*wire.PushCommit{{ClientCommitID: "k1", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert,
			Payload: sparse(t, v1, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "one"})}}}},
		Pull: &wire.PullHeader{Accept: 1}, Subscriptions: []*wire.Subscription{sub}})
	if pr := framesOf[*wire.PushResult](m); len(pr) != 1 || pr[0].Status != wire.PushApplied {
		t.Fatalf("v1 push = %+v", pr)
	}
	// Its bootstrap segment is in the version-1 layout.
	inl := framesOf[*wire.SegmentInline](m)
	if len(inl) != 1 {
		t.Fatalf("v1 bootstrap frames = %d inline segments, want 1", len(inl))
	}
	seg, err := wire.DecodeSegment(inl[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Header.SchemaVersion != 1 || len(seg.Header.Columns) != 3 {
		t.Fatalf("v1 segment header = %+v, want version 1 with 3 columns", seg.Header)
	}

	// A version-2 client sets the appended column.
	ep2 := e.epoch("c2", 2)
	base := int64(1)
	m = e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c2", SchemaVersion: 2, LogEpoch: &ep2},
		Commits: []*wire.PushCommit{{ClientCommitID: "k2", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert, BaseVersion: &base,
			Payload: sparse(t, v2, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "two"}, wire.Value{Int: 5})}}}}})
	if pr := framesOf[*wire.PushResult](m); len(pr) != 1 || pr[0].Status != wire.PushApplied {
		t.Fatalf("v2 push = %+v", pr)
	}

	// The version-1 client's incremental pull gets the row in its layout.
	m = e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &ep},
		Pull: &wire.PullHeader{Accept: 1}, Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Scopes: sub.Scopes, Cursor: 1}}})
	commits := framesOf[*wire.Commit](m)
	if len(commits) != 1 || len(commits[0].Changes) != 1 {
		t.Fatalf("v1 pull commits = %+v, want one change", commits)
	}
	vals, err := t1.RowCodec().DecodeRow(commits[0].Changes[0].Row)
	if err != nil {
		t.Fatalf("v1 client cannot decode its change row: %v", err)
	}
	if vals[2].Str != "two" {
		t.Fatalf("v1 row = %+v, want title two", vals)
	}

	// A version-1 update leaves the appended column alone.
	base = 2
	e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &ep},
		Commits: []*wire.PushCommit{{ClientCommitID: "k3", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert, BaseVersion: &base,
			Payload: sparse(t, v1, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "three"})}}}}})
	m = e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c2", SchemaVersion: 2, LogEpoch: &ep2},
		Pull: &wire.PullHeader{Accept: 1}, Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks", Scopes: sub.Scopes, Cursor: -1}}})
	seg2, err := wire.DecodeSegment(framesOf[*wire.SegmentInline](m)[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := t2.RowCodec().DecodeRow(seg2.Blocks[0][0].Row)
	if err != nil {
		t.Fatal(err)
	}
	if cur[2].Str != "three" || cur[3].Null || cur[3].Int != 5 {
		t.Fatalf("current row = %+v, want title three and priority 5 kept", cur)
	}

	// A stale version-1 write conflicts with a server row in its layout.
	base = 1
	m = e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &ep},
		Commits: []*wire.PushCommit{{ClientCommitID: "k4", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert, BaseVersion: &base,
			Payload: sparse(t, v1, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "four"})}}}}})
	pr := framesOf[*wire.PushResult](m)
	if len(pr) != 1 || pr[0].Status != wire.PushRejected || pr[0].Results[0].Status != wire.OpConflict {
		t.Fatalf("stale v1 push = %+v, want a conflict", pr)
	}
	if _, err := t1.RowCodec().DecodeRow(pr[0].Results[0].ServerRow); err != nil {
		t.Fatalf("conflict serverRow is not in the v1 layout: %v", err)
	}
	if got := len(pr[0].Results[0].ConflictColumns); got != 1 {
		t.Fatalf("conflictColumns has %d bytes, want 1 (3 columns)", got)
	}
}

func TestSchemaWindowRejectsNonPrefix(t *testing.T) {
	v1, _ := windowSchemas(t)
	bad, err := schema.New(2).Table("tasks", "id", schema.String("id"), schema.String("project_id")).Scope("project:{project_id}").Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := newWithWindow(t, bad, v1); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("New = %v, want a refusal of a window whose older table is not a prefix", err)
	}
}

// TestSchemaWindowRealtime: a delta to a socket whose subscription was
// pulled with an older schema version carries rows in that layout.
func TestSchemaWindowRealtime(t *testing.T) {
	v1, v2 := windowSchemas(t)
	e := newWindowServer(t, v2, v1)
	t1, _ := v1.Table("tasks")
	ep1 := e.epoch("c1", 1)
	sub := &wire.Subscription{ID: "s", Table: "tasks", Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}
	e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c1", SchemaVersion: 1, LogEpoch: &ep1},
		Pull: &wire.PullHeader{Accept: 1}, Subscriptions: []*wire.Subscription{sub}})
	sock, err := rtDial(context.Background(), rtDialer("alice"), "ws"+strings.TrimPrefix(e.url, "http")+"/realtime?clientId=c1", 16)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.nc.Close()
	sock.t, sock.clientID = t, "c1"
	sock.startReading()
	if h := sock.hello(); h.RequiresSync {
		t.Fatalf("hello = %+v, want a caught-up registered client", h)
	}
	ep2 := e.epoch("c2", 2)
	e.round(&wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c2", SchemaVersion: 2, LogEpoch: &ep2},
		Commits: []*wire.PushCommit{{ClientCommitID: "k", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert,
			Payload: sparse(t, v2, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "t"}, wire.Value{Int: 9})}}}}})
	commits := framesOf[*wire.Commit](sock.delta())
	if len(commits) != 1 || len(commits[0].Changes) != 1 {
		t.Fatalf("delta commits = %+v", commits)
	}
	if _, err := t1.RowCodec().DecodeRow(commits[0].Changes[0].Row); err != nil {
		t.Fatalf("the delta row is not in the version-1 layout: %v", err)
	}
}

// A window whose current schema declares a reference its older version
// did not is refused (§9: references stay identical).
func TestSchemaWindowRejectsChangedReferences(t *testing.T) {
	build := func(version int32, ref bool) *schema.Compiled {
		b := schema.New(version).
			Table("projects", "id", schema.String("id"), schema.String("project_id")).Scope("project:{project_id}").
			Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title").Null()).
			Scope("project:{project_id}").Index("tasks_by_project", "project_id")
		if ref {
			b = b.Reference("project_id", "projects", schema.OnDeleteCascade)
		}
		c, err := b.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := newWithWindow(t, build(2, true), build(1, false)); err == nil || !strings.Contains(err.Error(), "declared references") {
		t.Fatalf("New = %v, want a refusal of a window whose references changed", err)
	}
}

// A window in which a column becomes encrypted end to end (or stops
// being, or changes its declared type) is refused at start, though the
// wire view of the column, bytes, is the same (§9: existing columns stay
// identical): older clients would push plaintext into a column newer
// ones decrypt.
func TestSchemaWindowRejectsChangedEncryption(t *testing.T) {
	build := func(version int32, secret schema.Column) *schema.Compiled {
		c, err := schema.New(version).
			Table("tasks", "id", schema.String("id"), schema.String("project_id"), secret.Null()).
			Scope("project:{project_id}").Compile()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		old, now schema.Column
	}{
		{"plain to encrypted", schema.Bytes("secret"), schema.Encrypted("secret", wire.TypeString)},
		{"encrypted to plain", schema.Encrypted("secret", wire.TypeString), schema.Bytes("secret")},
		{"declared type", schema.Encrypted("secret", wire.TypeString), schema.Encrypted("secret", wire.TypeJSON)},
	} {
		if err := newWithWindow(t, build(2, tc.now), build(1, tc.old)); err == nil || !strings.Contains(err.Error(), `column "secret" of "tasks" changed`) {
			t.Errorf("%s: New = %v, want a refusal of the window", tc.name, err)
		}
	}
	if err := newWithWindow(t, build(2, schema.Encrypted("secret", wire.TypeString)), build(1, schema.Encrypted("secret", wire.TypeString))); err != nil {
		t.Errorf("an unchanged encrypted column: %v", err)
	}
}

// newWithWindow builds a server on a fresh in-memory store that serves
// current and the older versions, and returns New's error.
func newWithWindow(t *testing.T, current *schema.Compiled, older ...*schema.Compiled) error {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: sqlitestore.MemoryPath})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = syncgo.New(syncgo.Config{Store: st, Schema: current, SchemaWindow: older,
		Authenticate:  func(*http.Request) (syncgo.Auth, error) { return syncgo.Auth{}, nil },
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil }})
	return err
}
