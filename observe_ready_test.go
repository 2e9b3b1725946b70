package syncgo_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// probedServer is a server whose probes are mounted beside its protocol
// routes, as the binary mounts them: /healthz, /readyz, and the protocol
// under /api.
type probedServer struct {
	srv *syncgo.Server
	url string
}

// probed builds a server on st (not started) and serves it over HTTP.
func probed(t *testing.T, st store.Store, sc *schema.Compiled, decls ...store.CheckpointDeclaration) *probedServer {
	t.Helper()
	srv, err := syncgo.New(syncgo.Config{Store: st, Schema: sc, Declarations: decls, RetentionInterval: -1,
		Authenticate: bearerAuth,
		ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"project_id": {"*"}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	mux := http.NewServeMux()
	mux.Handle("/api/", http.StripPrefix("/api", srv.Handler()))
	mux.Handle("/healthz", srv.HealthzHandler())
	mux.Handle("/readyz", srv.ReadyzHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &probedServer{srv: srv, url: hs.URL}
}

// readyBody is the JSON body of /readyz.
type readyBody struct {
	Status               string `json:"status"`
	Phase                string `json:"phase"`
	Reason               string `json:"reason"`
	Partition            string `json:"partition"`
	Projection           string `json:"projection"`
	StoredSchemaVersion  int32  `json:"storedSchemaVersion"`
	RunningSchemaVersion int32  `json:"runningSchemaVersion"`
}

func (p *probedServer) probe(t *testing.T, path string) (int, readyBody) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body readyBody
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, b, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", path, ct)
	}
	return resp.StatusCode, body
}

// wantReady fails unless /readyz answers 200 ready.
func (p *probedServer) wantReady(t *testing.T, when string) {
	t.Helper()
	if status, body := p.probe(t, "/readyz"); status != http.StatusOK || body.Status != "ready" {
		t.Fatalf("%s: /readyz = %d %+v, want 200 ready", when, status, body)
	}
	if err := p.srv.CheckReady(context.Background()); err != nil {
		t.Fatalf("%s: CheckReady = %v", when, err)
	}
}

// wantNotReady fails unless /readyz answers 503 in the phase, and
// CheckReady agrees.
func (p *probedServer) wantNotReady(t *testing.T, when, phase string) readyBody {
	t.Helper()
	status, body := p.probe(t, "/readyz")
	if status != http.StatusServiceUnavailable || body.Status != "not_ready" || body.Phase != phase || body.Reason == "" {
		t.Fatalf("%s: /readyz = %d %+v, want 503 not_ready in phase %s with a reason", when, status, body, phase)
	}
	var re *syncgo.ReadinessError
	if err := p.srv.CheckReady(context.Background()); !errors.As(err, &re) || re.Phase != phase {
		t.Fatalf("%s: CheckReady = %v, want a readiness error in phase %s", when, err, phase)
	}
	return body
}

// /readyz follows the readiness gate: not ready before Start, ready after;
// not ready while a checkpoint this process did not declare is pending
// (the running server and one that failed to start), ready again once it
// is activated; /healthz answers 200 throughout.
func TestReadyzFollowsTheGate(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		_, v2 := windowSchemas(t)
		a := probed(t, e.open(), v2)
		if status, body := a.probe(t, "/healthz"); status != 200 || body.Status != "ok" {
			t.Fatalf("/healthz before Start = %d %+v", status, body)
		}
		a.wantNotReady(t, "before Start", syncgo.PhaseStarting)
		if err := a.srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.wantReady(t, "after Start")

		// An operator declares a checkpoint at the running version: the
		// running server that did not declare it is not ready.
		b := e.open().(store.Barrier)
		if _, err := b.DeclareCheckpoint(context.Background(), store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2}, 1); err != nil {
			t.Fatal(err)
		}
		body := a.wantNotReady(t, "checkpoint pending", syncgo.PhaseBackfillCheckpoint)
		if body.Partition != "p" || body.Projection != "proj" {
			t.Fatalf("pending checkpoint body %+v: want partition p, projection proj", body)
		}

		// A process that does not declare it fails to start and says so.
		c := probed(t, e.open(), v2)
		if err := c.srv.Start(context.Background()); err == nil {
			t.Fatal("a process that does not declare the pending checkpoint started")
		}
		body = c.wantNotReady(t, "failed start", syncgo.PhaseBackfillCheckpoint)
		if body.Partition != "p" || body.Projection != "proj" {
			t.Fatalf("failed start body %+v: want partition p, projection proj", body)
		}
		if status, _ := c.probe(t, "/healthz"); status != 200 {
			t.Fatalf("/healthz of a server that failed to start = %d, want 200 (alive)", status)
		}

		// The declaring process is ready.
		d := probed(t, e.open(), v2, store.CheckpointDeclaration{Partition: "p", Name: "proj", SchemaVersion: 2})
		if err := d.srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.wantReady(t, "declaring process")

		// The backfill activates the checkpoint: the first server is
		// ready again.
		if _, err := syncgo.RunBackfill(context.Background(), e.open(), syncgo.Backfill{Partition: "p", Name: "proj", Sources: []string{"tasks"}}); err != nil {
			t.Fatal(err)
		}
		a.wantReady(t, "after activation")

		// Stop: not ready (a load balancer drains it).
		if err := a.srv.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.wantNotReady(t, "after Stop", syncgo.PhaseStopping)
	})
}

// A newer schema stored by another process makes the older process not
// ready (storage_migration, with both versions); a database that does not
// answer makes it not ready in phase database, without the error's text
// in the body.
func TestReadyzNewerSchemaAndDatabase(t *testing.T) {
	forEachBarrierDriver(t, func(t *testing.T, e *barrierEnv) {
		v1, v2 := windowSchemas(t)
		st := e.open()
		old := probed(t, st, v1)
		if err := old.srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		old.wantReady(t, "v1 started")
		if err := probed(t, e.open(), v2).srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		body := old.wantNotReady(t, "v2 stored", syncgo.PhaseStorageMigration)
		if body.StoredSchemaVersion != 2 || body.RunningSchemaVersion != 1 {
			t.Fatalf("body %+v, want stored 2, running 1", body)
		}

		// The database goes away under a started server.
		fresh := e.open()
		p := probed(t, fresh, v2)
		if err := p.srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		p.wantReady(t, "v2 started")
		_ = fresh.Close()
		body = p.wantNotReady(t, "store closed", syncgo.PhaseDatabase)
		if strings.Contains(body.Reason, "closed") || strings.Contains(body.Reason, "store:") {
			t.Fatalf("reason %q carries the error's text", body.Reason)
		}
	})
}
