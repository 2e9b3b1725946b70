package syncgo_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
	"github.com/syncgo/syncgo/wire"
)

// The sqlite-image tests (§5.3) drive the server through its HTTP handler
// with hand-built wire requests, seed rows straight into the store, and
// count image builds by the server's "sqlite image built" log record.

const (
	imgPartition = "image-tenant"
	imgEpoch     = "image-epoch-1"
	// imgAcceptAll is inline rows, external rows and sqlite images.
	imgAcceptAll   = wire.AcceptInlineRows | wire.AcceptExternalRows | wire.AcceptSQLite
	imgAcceptRows  = wire.AcceptInlineRows | wire.AcceptExternalRows
	imgContentType = "application/vnd.syncular.sync.v2"
)

// imgSchema has tasks (a column of every plain type) and secrets (an
// encrypted column), both scoped by project.
func imgSchema(t *testing.T) *schema.Compiled {
	t.Helper()
	c, err := schema.New(1).
		Table("tasks", "id",
			schema.String("id"), schema.String("project_id"), schema.String("title").Null(),
			schema.Integer("n").Null(), schema.Float("score").Null(), schema.Boolean("done").Null(),
			schema.JSON("meta").Null(), schema.Bytes("data").Null()).
		Scope("project:{project_id}").
		Table("secrets", "id", schema.String("id"), schema.String("project_id"), schema.Encrypted("body", wire.TypeString)).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// imgLogCounter counts the server's log records by message.
type imgLogCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *imgLogCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *imgLogCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *imgLogCounter) WithGroup(string) slog.Handler            { return c }
func (c *imgLogCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r.Message]++
	return nil
}

func (c *imgLogCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[msg]
}

// imgEnv is a server on a fresh SQLite store.
type imgEnv struct {
	t      *testing.T
	store  store.Store
	schema *schema.Compiled
	url    string
	logs   *imgLogCounter
	nowMs  atomic.Int64
	ids    atomic.Int64
}

func newImgEnv(t *testing.T, tweak ...func(*syncgo.Config)) *imgEnv {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newImgEnvOn(t, st, tweak...)
}

// newImgEnvOn starts the server of an imgEnv on st.
func newImgEnvOn(t *testing.T, st store.Store, tweak ...func(*syncgo.Config)) *imgEnv {
	t.Helper()
	ctx := context.Background()
	e := &imgEnv{t: t, store: st, schema: imgSchema(t), logs: &imgLogCounter{counts: map[string]int{}}}
	e.nowMs.Store(1_700_000_000_000)
	cfg := syncgo.Config{
		Store:  st,
		Schema: e.schema,
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			actor, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || actor == "" {
				return syncgo.Auth{}, fmt.Errorf("no bearer token")
			}
			part := imgPartition
			if a, p, found := strings.Cut(actor, "@"); found {
				actor, part = a, p
			}
			return syncgo.Auth{ActorID: actor, Partition: part}, nil
		},
		ResolveScopes: func(_ context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
			if req.ActorID == "outsider" {
				return map[string][]string{"project_id": {"elsewhere"}}, nil
			}
			return map[string][]string{"project_id": {"*"}}, nil
		},
		Logger:            slog.New(e.logs),
		Now:               e.nowMs.Load,
		RetentionInterval: -1,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	if _, err := st.TouchPartition(ctx, imgPartition, e.nowMs.Load(), imgEpoch); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

func (e *imgEnv) builds() int { return e.logs.count("sqlite image built") }

// imgTask returns the values of a task row; i varies every column,
// including NULLs, unicode, JSON text kept verbatim and bytes.
func imgTask(project string, i int) []wire.Value {
	v := []wire.Value{
		{Str: fmt.Sprintf("%s-task-%04d", project, i)}, {Str: project},
		{Str: fmt.Sprintf("tâche n°%d ✓", i)}, {Int: int64(i) * 1_000_003}, {Float: float64(i) / 8},
		{Bool: i%2 == 0}, {Str: fmt.Sprintf(`{ "i" : %d, "tags":["a", "b"] }`, i)}, {Bytes: []byte{byte(i), 0, 0xff}},
	}
	if i%5 == 0 {
		for k := 2; k < len(v); k++ {
			v[k] = wire.Value{Null: true}
		}
	}
	return v
}

// seed commits rows to a table in one commit and returns its sequence.
// Each row's server version is version.
func (e *imgEnv) seed(table string, rows [][]wire.Value, version int64) int64 {
	e.t.Helper()
	writes := make([]store.RowWrite, len(rows))
	changes := make([]store.Change, len(rows))
	for i, vals := range rows {
		writes[i] = storetest.NewRowWrite(e.t, e.schema, table, vals, version)
		changes[i] = storetest.UpsertChange(writes[i])
	}
	var seq int64
	err := e.store.Write(context.Background(), imgPartition, func(ctx context.Context, tx store.WriteTx) error {
		for _, w := range writes {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
		}
		var err error
		seq, err = tx.AppendCommit(ctx, store.NewCommit{ClientID: "seeder", ClientCommitID: fmt.Sprint("seed-", e.ids.Add(1)),
			ActorID: "seeder", CreatedAtMs: e.nowMs.Load(), Changes: changes})
		return err
	})
	if err != nil {
		e.t.Fatalf("seed: %v", err)
	}
	return seq
}

// seedTasks commits tasks from..to-1 of a project.
func (e *imgEnv) seedTasks(project string, from, to int, version int64) int64 {
	e.t.Helper()
	var rows [][]wire.Value
	for i := from; i < to; i++ {
		rows = append(rows, imgTask(project, i))
	}
	return e.seed("tasks", rows, version)
}

// imgSub is a subscription of the tests.
func imgSub(id, table string, cursor int64, token *string, projects ...string) *wire.Subscription {
	return &wire.Subscription{ID: id, Table: table, Cursor: cursor, BootstrapState: token,
		Scopes: wire.ScopeMap{{Key: "project_id", Values: projects}}}
}

// imgSection is one subscription section of a response.
type imgSection struct {
	start   *wire.SubStart
	refs    []*wire.SegmentRef
	inlines []*wire.SegmentInline
	commits []*wire.Commit
	end     *wire.SubEnd
}

// pull posts a pull of one request and returns its sections by id.
func (e *imgEnv) pull(actor, clientID string, accept uint8, limitRows int32, subs ...*wire.Subscription) map[string]*imgSection {
	e.t.Helper()
	return e.pullWith(actor, clientID, wire.PullHeader{Accept: accept, LimitSnapshotRows: limitRows}, subs...)
}

// pullWith posts a pull with a full PULL_HEADER.
func (e *imgEnv) pullWith(actor, clientID string, h wire.PullHeader, subs ...*wire.Subscription) map[string]*imgSection {
	e.t.Helper()
	epoch := imgEpoch
	req := wire.Request{Version: wire.Version3,
		Header:        &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		Pull:          &h,
		Subscriptions: subs}
	body, err := req.MarshalBinary()
	if err != nil {
		e.t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, e.url+"/sync", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", imgContentType)
	hr.Header.Set("Authorization", "Bearer "+actor)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("POST /sync: HTTP %d: %s", resp.StatusCode, raw)
	}
	msg, err := wire.DecodeMessage(raw, wire.DecoderOptions{Kind: wire.KindResponse})
	if err != nil {
		e.t.Fatalf("decode response: %v", err)
	}
	out := map[string]*imgSection{}
	var cur *imgSection
	for _, f := range msg.Frames {
		switch f := f.(type) {
		case *wire.SubStart:
			cur = &imgSection{start: f}
			out[f.ID] = cur
		case *wire.SegmentRef:
			cur.refs = append(cur.refs, f)
		case *wire.SegmentInline:
			cur.inlines = append(cur.inlines, f)
		case *wire.Commit:
			cur.commits = append(cur.commits, f)
		case *wire.SubEnd:
			cur.end = f
		case *wire.ErrorFrame:
			e.t.Fatalf("ERROR frame %s: %s", f.Code, f.Message)
		}
	}
	return out
}

// imgDownload is the answer of GET /segments/{id}.
type imgDownload struct {
	status int
	header http.Header
	body   []byte
}

// download fetches a segment from the direct endpoint (§5.5).
func (e *imgEnv) download(actor, id string, scopes map[string][]string, extra ...string) imgDownload {
	e.t.Helper()
	hr, err := http.NewRequest(http.MethodGet, e.url+"/segments/"+url.PathEscape(id), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+actor)
	hr.Header.Set("X-Syncular-Scopes", string(wire.CanonicalScopeJSON(scopes)))
	for i := 0; i+1 < len(extra); i += 2 {
		hr.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return imgDownload{status: resp.StatusCode, header: resp.Header, body: b}
}

func imgSegmentID(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
