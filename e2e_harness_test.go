package syncgo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// The end-to-end tests run the server over real HTTP (httptest.Server, real
// sockets) against the in-memory client of internal/sspclient, once per
// storage driver.

// e2ePartition is the partition every test actor authenticates into, unless
// its token names another ("actor@partition").
const e2ePartition = "tenant-1"

// e2eDriver opens a fresh, empty store of one kind for a test.
type e2eDriver struct {
	name string
	open func(t *testing.T) store.Store
}

var e2eDrivers = []e2eDriver{
	{name: "sqlite", open: openSQLite},
	{name: "postgres", open: openPostgres},
}

// forEachDriver runs fn as a parallel subtest per storage driver.
func forEachDriver(t *testing.T, fn func(t *testing.T, d e2eDriver)) {
	t.Helper()
	for _, d := range e2eDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

func openSQLite(t *testing.T) store.Store {
	s, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db")})
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openPostgres opens a pgstore on a fresh Postgres schema (selected through
// the connections' search_path), dropped at cleanup.
func openPostgres(t *testing.T) store.Store {
	s, err := pgstore.Open(context.Background(), pgstore.Config{URL: pgtest.Schema(t, "syncgo_e2e", false), MaxConns: 8})
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testSchema is the served schema: tasks scoped by project.
func e2eSchema(t testing.TB, version int32) *schema.Compiled {
	t.Helper()
	c, err := schema.New(version).
		Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
			schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
		Scope("project:{project_id}").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// env is one server over real HTTP on a fresh store.
type e2eEnv struct {
	t      *testing.T
	store  store.Store
	schema *schema.Compiled
	srv    *syncgo.Server
	url    string

	mu      sync.Mutex
	allowed map[string]map[string][]string // actor → allowed scopes
}

// newE2EEnv starts a server on a fresh store of the driver; tweak adjusts
// its Config.
func newE2EEnv(t *testing.T, d e2eDriver, tweak ...func(*syncgo.Config)) *e2eEnv {
	t.Helper()
	e := &e2eEnv{t: t, store: d.open(t), schema: e2eSchema(t, 1), allowed: map[string]map[string][]string{}}
	cfg := syncgo.Config{Store: e.store, Schema: e.schema, Authenticate: bearerAuth, ResolveScopes: e.resolve,
		RetentionInterval: -1} // the tests prune explicitly
	for _, f := range tweak {
		f(&cfg)
	}
	srv, err := syncgo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	e.srv = srv
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// bearerAuth reads "Authorization: Bearer actor[@partition]".
func bearerAuth(r *http.Request) (syncgo.Auth, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return syncgo.Auth{}, errors.New("no bearer token")
	}
	actor, part, found := strings.Cut(tok, "@")
	if !found {
		part = e2ePartition
	}
	return syncgo.Auth{ActorID: actor, Partition: part}, nil
}

// errResolverOutage is the failure of the resolver for an actor allowed
// nil scopes.
var errResolverOutage = errors.New("scope resolver outage")

// resolve allows every project unless allow set the actor's scopes.
func (e *e2eEnv) resolve(_ context.Context, req syncgo.ScopeRequest) (map[string][]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.allowed[req.ActorID]; ok {
		if a == nil {
			return nil, errResolverOutage
		}
		return maps.Clone(a), nil
	}
	return map[string][]string{"project_id": {"*"}}, nil
}

// allow sets the scopes the resolver returns for an actor; nil makes the
// resolver fail.
func (e *e2eEnv) allow(actor string, scopes map[string][]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.allowed[actor] = scopes
}

// client returns a client of the server for an actor's token.
func (e *e2eEnv) client(token string, opts sspclient.Options) *sspclient.Client {
	e.t.Helper()
	c, err := sspclient.New(e.url, token, e.schema, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// partitionState returns the partition's registry entry and counters.
func (e *e2eEnv) partitionState() store.Partition {
	e.t.Helper()
	p, err := e.store.Partition(context.Background(), e2ePartition)
	if err != nil {
		e.t.Fatalf("Partition: %v", err)
	}
	return p
}

// serverRows renders the table's current rows on the server, by rowId:
// "v<version> <values as JSON>".
func (e *e2eEnv) serverRows(table string) map[string]string {
	e.t.Helper()
	t, _ := e.schema.Table(table)
	out := map[string]string{}
	var after *string
	for {
		rows, err := e.store.ListRows(context.Background(), e2ePartition, table, after, 500)
		if err != nil {
			e.t.Fatalf("ListRows: %v", err)
		}
		for _, r := range rows {
			vals, err := t.RowCodec().DecodeRow(r.Payload)
			if err != nil {
				e.t.Fatalf("stored row %s: %v", r.RowID, err)
			}
			out[r.RowID] = renderRow(e.t, t, r.ServerVersion, vals)
		}
		if len(rows) < 500 {
			return out
		}
		after = &rows[len(rows)-1].RowID
	}
}

// clientRows renders a client's synced rows like serverRows.
func clientRows(t *testing.T, c *sspclient.Client, table string) map[string]string {
	t.Helper()
	tbl, _ := c.Schema().Table(table)
	out := map[string]string{}
	for id, r := range c.Rows(table) {
		out[id] = renderRow(t, tbl, r.Version, r.Values)
	}
	return out
}

func renderRow(t *testing.T, tbl *schema.CompiledTable, version int64, vals []wire.Value) string {
	t.Helper()
	b, err := json.Marshal(wire.RenderRowValues(tbl.WireColumns(), vals))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("v%d %s", version, b)
}
