package syncgo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// barrierDriver makes a fresh database that several stores share, as
// several server processes share one database, and opens stores on it.
type barrierDriver struct {
	name     string
	database func(t *testing.T) string
	open     func(t *testing.T, db string) (store.Store, error)
}

var barrierDrivers = []barrierDriver{
	{
		name:     "sqlite",
		database: func(t *testing.T) string { return filepath.Join(t.TempDir(), "barrier.db") },
		open: func(_ *testing.T, db string) (store.Store, error) {
			return sqlitestore.Open(context.Background(), sqlitestore.Config{Path: db})
		},
	},
	{
		name:     "postgres",
		database: barrierPostgresSchema,
		open: func(_ *testing.T, db string) (store.Store, error) {
			return pgstore.Open(context.Background(), pgstore.Config{URL: db, MaxConns: 4})
		},
	},
}

// barrierPostgresSchema creates a Postgres schema, dropped at cleanup, and
// returns the URL that selects it (search_path).
func barrierPostgresSchema(t *testing.T) string { return pgtest.Schema(t, "syncgo_barrier", false) }

// forEachBarrierDriver runs fn as a parallel subtest per storage driver,
// each on a fresh shared database.
func forEachBarrierDriver(t *testing.T, fn func(t *testing.T, e *barrierEnv)) {
	for _, d := range barrierDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, &barrierEnv{t: t, driver: d, db: d.database(t)})
		})
	}
}

// barrierEnv is one database shared by several servers, as several
// processes share one database.
type barrierEnv struct {
	t      *testing.T
	driver barrierDriver
	db     string
}

func (e *barrierEnv) open() store.Store {
	e.t.Helper()
	st, err := e.driver.open(e.t, e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}

func (e *barrierEnv) server(sc *schema.Compiled, decls ...store.CheckpointDeclaration) (store.Store, string, error) {
	e.t.Helper()
	st, _, url, err := e.serverOf(sc, decls...)
	return st, url, err
}

// serverOf is server that also returns the Server.
func (e *barrierEnv) serverOf(sc *schema.Compiled, decls ...store.CheckpointDeclaration) (store.Store, *syncgo.Server, string, error) {
	e.t.Helper()
	st := e.open()
	srv, err := syncgo.New(syncgo.Config{
		Store: st, Schema: sc, Declarations: decls, RetentionInterval: -1,
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
	})
	if err != nil {
		e.t.Fatal(err)
	}
	startErr := srv.Start(context.Background())
	e.t.Cleanup(func() { srv.Stop(context.Background()) })
	hs := httptest.NewServer(srv.Handler())
	e.t.Cleanup(hs.Close)
	return st, srv, hs.URL, startErr
}

// post sends a request and returns the status and body.
func post(t *testing.T, url string, req *wire.Request) (int, []byte) {
	t.Helper()
	body, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest("POST", url+"/sync", bytes.NewReader(body))
	hr.Header.Set("Content-Type", syncgo.ProtocolContentType)
	hr.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func pullReq(epoch *string, version int32) *wire.Request {
	return &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: version, LogEpoch: epoch},
		Pull: &wire.PullHeader{Accept: 3}, Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}}
}

func wantNotReady(t *testing.T, status int, body []byte, detailKey string) {
	t.Helper()
	if status != http.StatusServiceUnavailable {
		t.Fatalf("status %d (%s), want 503", status, body)
	}
	pe, err := syncerr.ParseJSON(body)
	if err != nil || pe.Code != syncerr.CodeSchemaNotReady {
		t.Fatalf("body %s, want sync.schema_not_ready", body)
	}
	var d map[string]any
	if err := json.Unmarshal(pe.Details, &d); err != nil || d[detailKey] == nil {
		t.Fatalf("details %s, want %q", pe.Details, detailKey)
	}
	if strings.Contains(pe.Message, "proj") {
		t.Fatalf("message %q names the projection", pe.Message)
	}
}

func TestMigrationBarrierServing(t *testing.T) {
	forEachBarrierDriver(t, testMigrationBarrierServing)
}

func testMigrationBarrierServing(t *testing.T, e *barrierEnv) {
	_, v2 := windowSchemas(t)
	_, urlA, err := e.server(v2)
	if err != nil {
		t.Fatal(err)
	}
	status, body := post(t, urlA, pullReq(nil, 2))
	m, err := wire.DecodeMessage(body, wire.DecoderOptions{})
	if status != 200 || err != nil {
		t.Fatalf("acquire epoch: %d %v", status, err)
	}
	epoch := m.Frames[0].(*wire.RespHeader).LogEpoch

	// An operator declares a checkpoint at the running version: the
	// running server that did not declare it refuses to serve.
	b := e.open().(store.Barrier)
	if _, err := b.DeclareCheckpoint(context.Background(), store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1); err != nil {
		t.Fatal(err)
	}
	status, body = post(t, urlA, pullReq(&epoch, 2))
	wantNotReady(t, status, body, "projection")

	// A new process that does not declare it refuses to start, in the
	// backfill_checkpoint phase; requests to it answer with that phase.
	_, srvC, urlC, err := e.serverOf(v2)
	var re *syncgo.ReadinessError
	if !errors.As(err, &re) || re.Phase != syncgo.PhaseBackfillCheckpoint {
		t.Fatalf("Start = %v, want a readiness error in phase backfill_checkpoint", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "partition=p") || !strings.Contains(msg, "name=proj") {
		t.Fatalf("Start = %q: the refusal must name the checkpoint's partition and name", msg)
	}
	status, body = post(t, urlC, pullReq(&epoch, 2))
	wantNotReady(t, status, body, "phase")
	if pe, _ := syncerr.ParseJSON(body); !strings.Contains(string(pe.Details), `"projection":"proj"`) ||
		!strings.Contains(string(pe.Details), `"partition":"p"`) {
		t.Fatalf("details %s: want the checkpoint's partition and projection", pe.Details)
	}

	// The declaring process starts and serves.
	_, urlB, err := e.server(v2, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2})
	if err != nil {
		t.Fatalf("declaring process: %v", err)
	}
	if status, body = post(t, urlB, pullReq(&epoch, 2)); status != 200 {
		t.Fatalf("declaring process answers %d: %s", status, body)
	}
	// A declaration without a version is of the running one; one of
	// another version could never cover the checkpoint, and is refused.
	_, urlD, err := e.server(v2, store.CheckpointDeclaration{Partition: "p", Name: "proj"})
	if err != nil {
		t.Fatalf("process declaring without a version: %v", err)
	}
	if status, body = post(t, urlD, pullReq(&epoch, 2)); status != 200 {
		t.Fatalf("process declaring without a version answers %d: %s", status, body)
	}
	_, err = syncgo.New(syncgo.Config{Store: e.open(), Schema: v2,
		Declarations:  []store.CheckpointDeclaration{{Partition: "p", Name: "proj", SchemaVersion: 1}},
		Authenticate:  func(*http.Request) (syncgo.Auth, error) { return syncgo.Auth{}, errors.New("none") },
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) { return nil, nil }})
	if err == nil || !strings.Contains(err.Error(), "not the running version 2") {
		t.Fatalf("New with a declaration of version 1 under schema 2 = %v, want a refusal", err)
	}

	// The backfill activates the checkpoint; every process serves again.
	cp, err := syncgo.RunBackfill(context.Background(), e.open(), syncgo.Backfill{Partition: "p", Name: "proj", Sources: []string{"tasks"}})
	if err != nil || cp.State != store.CheckpointActivated {
		t.Fatalf("RunBackfill = %+v, %v", cp, err)
	}
	if status, body = post(t, urlA, pullReq(&epoch, 2)); status != 200 {
		t.Fatalf("after activation: %d %s", status, body)
	}
	// The process that refused to start starts when its host calls Start
	// again, without a new Server, and serves.
	if err := srvC.Start(context.Background()); err != nil {
		t.Fatalf("Start again after the activation: %v", err)
	}
	if status, body = post(t, urlC, pullReq(&epoch, 2)); status != 200 {
		t.Fatalf("the process started again answers %d: %s", status, body)
	}
}

func TestMigrationBarrierFencesOldWriters(t *testing.T) {
	forEachBarrierDriver(t, testMigrationBarrierFencesOldWriters)
}

func testMigrationBarrierFencesOldWriters(t *testing.T, e *barrierEnv) {
	v1, v2 := windowSchemas(t)
	oldStore, urlOld, err := e.server(v1)
	if err != nil {
		t.Fatal(err)
	}
	_, body := post(t, urlOld, pullReq(nil, 1))
	m, _ := wire.DecodeMessage(body, wire.DecoderOptions{})
	epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
	push := func(url, id string) (int, []byte) {
		return post(t, url, &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: id, Operations: []wire.Operation{{Table: "tasks", RowID: id, Op: wire.OpUpsert,
				Payload: sparse(t, v1, wire.Value{Str: id}, wire.Value{Str: "p1"}, wire.Value{Str: "x"})}}}}})
	}
	if status, body := push(urlOld, "a"); status != 200 || !bytes.Contains(body, []byte("a")) {
		t.Fatalf("push before the bump: %d", status)
	}
	// A version-2 process migrates the database and declares a checkpoint
	// for its projection: the fence rises to 2.
	if _, _, err := e.server(v2, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}); err != nil {
		t.Fatalf("bump: %v", err)
	}
	// The old process is now refused: the serve gate sees the newer
	// stored schema before anything is written.
	status, body := push(urlOld, "b")
	wantNotReady(t, status, body, "storedSchemaVersion")
	// And the database itself rejects an append by the old process's
	// store, which reads no gate: the writer fence trigger refuses it.
	err = oldStore.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
		_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: "x", ClientCommitID: "y", ActorID: "z"})
		return err
	})
	if store.ErrorCode(err) != store.CodeWriterFenceRejected {
		t.Fatalf("old writer's append = %v, want %s", err, store.CodeWriterFenceRejected)
	}
}

// A push stopped by the writer fence (a checkpoint declared for a newer
// version, before any process migrated) answers sync.schema_not_ready with
// the fence, the stored and the running version in its details.
func TestMigrationBarrierFenceRefusalDetails(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		v1, _ := windowSchemas(t)
		_, url, err := e.server(v1)
		if err != nil {
			t.Fatal(err)
		}
		_, body := post(t, url, pullReq(nil, 1))
		m, _ := wire.DecodeMessage(body, wire.DecoderOptions{})
		epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
		b := e.open().(store.Barrier)
		if _, err := b.DeclareCheckpoint(context.Background(), store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1); err != nil {
			t.Fatal(err)
		}
		status, body := post(t, url, &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*wire.PushCommit{{ClientCommitID: "a", Operations: []wire.Operation{{Table: "tasks", RowID: "a", Op: wire.OpUpsert,
				Payload: sparse(t, v1, wire.Value{Str: "a"}, wire.Value{Str: "p1"}, wire.Value{Str: "x"})}}}}})
		wantNotReady(t, status, body, "writerFence")
		pe, _ := syncerr.ParseJSON(body)
		var d map[string]float64
		if err := json.Unmarshal(pe.Details, &d); err != nil {
			t.Fatal(err)
		}
		if d["writerFence"] != 2 || d["storedSchemaVersion"] != 1 || d["runningSchemaVersion"] != 1 {
			t.Fatalf("details %s, want writerFence 2, storedSchemaVersion 1, runningSchemaVersion 1", pe.Details)
		}
	})
}

// A backfill derives its projection from the source log: commits the log
// no longer holds (pruned below the horizon) were never projected, so the
// run must not advance its watermark over them and activate, but stop as
// unverifiable, leaving the checkpoint incomplete.
func TestBackfillRefusesPrunedSourceLog(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		ctx := context.Background()
		v1, _ := windowSchemas(t)
		st, url, err := e.server(v1)
		if err != nil {
			t.Fatal(err)
		}
		_, body := post(t, url, pullReq(nil, 1))
		m, _ := wire.DecodeMessage(body, wire.DecoderOptions{})
		epoch := m.Frames[0].(*wire.RespHeader).LogEpoch
		for _, id := range []string{"a", "b", "c", "d"} {
			status, body := post(t, url, &wire.Request{Version: 3, Header: &wire.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
				Commits: []*wire.PushCommit{{ClientCommitID: id, Operations: []wire.Operation{{Table: "tasks", RowID: id, Op: wire.OpUpsert,
					Payload: sparse(t, v1, wire.Value{Str: id}, wire.Value{Str: "p1"}, wire.Value{Str: "x"})}}}}})
			if status != 200 {
				t.Fatalf("push %s: %d %s", id, status, body)
			}
		}
		if _, err := st.PruneThrough(ctx, "p", epoch, 2); err != nil {
			t.Fatal(err)
		}
		b := st.(store.Barrier)
		if _, err := b.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 1}, 1); err != nil {
			t.Fatal(err)
		}
		var projected []int64
		cp, err := syncgo.RunBackfill(ctx, st, syncgo.Backfill{Partition: "p", Name: "proj", Sources: []string{"tasks"},
			Project: func(_ context.Context, _ store.WriteTx, commits []store.Commit) (int64, error) {
				for _, c := range commits {
					projected = append(projected, c.Seq)
				}
				return int64(len(commits)), nil
			}})
		if !errors.Is(err, syncgo.ErrBackfillUnverifiable) {
			t.Fatalf("RunBackfill over a log pruned through 2 = %+v, %v (projected commits %v); want ErrBackfillUnverifiable",
				cp, err, projected)
		}
		cps, err := b.ReadCheckpoints(ctx, "p")
		if err != nil || len(cps) != 1 || cps[0].State == store.CheckpointActivated {
			t.Fatalf("checkpoints %+v, %v: want proj not activated", cps, err)
		}
	})
}

// A registered query (POST /operations) is a serve path like a pull: a
// process whose serve gate is closed, here by a checkpoint at its running
// version that it did not declare, answers sync.schema_not_ready instead of
// rows read from a projection that is still being backfilled.
func TestMigrationBarrierGatesRegisteredQueries(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		f := newOpsFixture(t, d)
		seed(t, f.e2eEnv, "alice", "tasks", taskRow("t1", "p1", "one"))
		if got := rowIDs(t, postOp(t, f.e2eEnv, "alice", query("w1", "tasksByProject", project("p1")))); !slices.Equal(got, []string{"t1"}) {
			t.Fatalf("before the checkpoint: %v", got)
		}
		b := f.store.(store.Barrier)
		if _, err := b.DeclareCheckpoint(context.Background(), store.CheckpointDeclaration{Partition: e2ePartition, Name: "proj", SchemaVersion: 1}, 1); err != nil {
			t.Fatal(err)
		}
		if err := f.srv.CheckReady(context.Background()); err == nil {
			t.Fatal("CheckReady passes with an undeclared checkpoint pending")
		}
		if res := postOp(t, f.e2eEnv, "alice", query("w1", "tasksByProject", project("p1"))); res.code() != syncerr.CodeSchemaNotReady {
			t.Fatalf("registered query with the serve gate closed = %v, want %s", res.msg, syncerr.CodeSchemaNotReady)
		}
	})
}
