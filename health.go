package syncgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
)

// Readiness phases of a server that is not ready although it did not fail
// to start (see CheckReady).
const (
	// PhaseStarting: Start has not completed.
	PhaseStarting = "starting"
	// PhaseStopping: Stop was called.
	PhaseStopping = "stopping"
	// PhaseDatabase: the database did not answer the readiness check.
	PhaseDatabase = "database"
)

// readyCheckTimeout bounds the database read of a readiness probe.
const readyCheckTimeout = 2 * time.Second

// readyReport is the answer of a readiness check, also the JSON body of
// /readyz. It never holds an error's text (which could name a host or a
// database user): the reason is a fixed sentence per phase, the error goes
// to the logger.
type readyReport struct {
	Ready                bool   `json:"-"`
	Status               string `json:"status"`
	Phase                string `json:"phase,omitempty"`
	Reason               string `json:"reason,omitempty"`
	Partition            string `json:"partition,omitempty"`
	Projection           string `json:"projection,omitempty"`
	StoredSchemaVersion  int32  `json:"storedSchemaVersion,omitempty"`
	RunningSchemaVersion int32  `json:"runningSchemaVersion,omitempty"`
	// CommitListener is, on a shared store (Postgres) once started,
	// whether the realtime commit listener is "listening" or "down".
	// Readiness does not depend on it: a listen connection that every
	// instance lost would otherwise take them all out at once.
	CommitListener string `json:"commitListener,omitempty"`

	gate *engine.GateStatus
	err  error
}

func notReadyReport(phase, reason string, err error) readyReport {
	return readyReport{Status: "not_ready", Phase: phase, Reason: reason, err: &ReadinessError{Phase: phase, Err: err}}
}

// readiness runs the readiness check: the server started and is not
// stopping, the database answers, no newer schema is stored and no
// checkpoint this process did not declare is pending (the serve gate that
// every request passes, read without a partition).
func (s *Server) readiness(ctx context.Context) readyReport {
	rep := s.readinessOf(ctx)
	if _, ok := s.cfg.Store.(store.CommitListener); ok && s.ready.Load() {
		rep.CommitListener = "down"
		if s.hub.Stats().ListenerUp {
			rep.CommitListener = "listening"
		}
	}
	return rep
}

// readinessOf is readiness without the commit listener's state.
func (s *Server) readinessOf(ctx context.Context) readyReport {
	if s.stopping.Load() {
		return notReadyReport(PhaseStopping, "the server is stopping", errors.New("Stop was called"))
	}
	if !s.ready.Load() {
		re := s.failed.Load()
		if re == nil {
			return notReadyReport(PhaseStarting, "the server has not started", errors.New("Start has not completed"))
		}
		rep := readyReport{Status: "not_ready", Phase: re.Phase, Reason: "the server failed to start", err: re}
		var se *store.Error
		if re.Phase == PhaseBackfillCheckpoint && errors.As(re, &se) {
			rep.Reason = "a backfill checkpoint this process did not declare is not activated"
			rep.Partition, _ = se.Details["partition"].(string)
			rep.Projection, _ = se.Details["name"].(string)
		}
		return rep
	}
	ctx, cancel := context.WithTimeout(ctx, readyCheckTimeout)
	defer cancel()
	g, err := s.eng.ReadGateStatus(ctx)
	if err != nil {
		rep := notReadyReport(PhaseDatabase, "the database did not answer", fmt.Errorf("read the serve gate: %w", err))
		return rep
	}
	switch {
	case g.Newer:
		rep := notReadyReport(PhaseStorageMigration, "a newer schema version is stored than this process runs",
			fmt.Errorf("stored schema version %d is newer than the running %d", g.Gate.StoredSchemaVersion, g.Running))
		rep.StoredSchemaVersion, rep.RunningSchemaVersion = g.Gate.StoredSchemaVersion, g.Running
		rep.gate = &g
		return rep
	case g.Blocking != nil:
		rep := notReadyReport(PhaseBackfillCheckpoint, "a backfill checkpoint this process did not declare is not activated",
			fmt.Errorf("checkpoint %s/%s at schema version %d is not activated", g.Blocking.Partition, g.Blocking.Name, g.Running))
		rep.Partition, rep.Projection = g.Blocking.Partition, g.Blocking.Name
		rep.gate = &g
		return rep
	}
	return readyReport{Ready: true, Status: "ready", gate: &g}
}

// CheckReady reports whether the server can serve now: nil, or a
// *ReadinessError whose Phase says why not (PhaseStarting, PhaseStopping,
// PhaseDatabase, PhaseStorageMigration, PhaseBackfillCheckpoint). It
// reads the database (bounded to 2 s): the serve gate where the store has
// the migration barrier, the schema marker otherwise.
func (s *Server) CheckReady(ctx context.Context) error {
	return s.readiness(ctx).err
}

// HealthzHandler answers every GET or HEAD with 200 and {"status":"ok"}:
// the process is alive and serves HTTP. It reads nothing; mount it where
// a liveness probe looks, such as /healthz.
func (s *Server) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProbe(w, r, http.StatusOK, []byte(`{"status":"ok"}`))
	})
}

// ReadyzHandler answers a readiness probe (mount it at /readyz, say): 200
// and {"status":"ready"} when CheckReady passes; otherwise 503 and a small
// JSON body naming the phase and the reason, such as
// {"status":"not_ready","phase":"backfill_checkpoint","reason":"…",
// "partition":"p","projection":"proj"}. The cause's error text goes to
// Config.Logger, not to the body.
func (s *Server) ReadyzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := s.readiness(r.Context())
		status := http.StatusOK
		if !rep.Ready {
			status = http.StatusServiceUnavailable
			if rep.Phase == PhaseDatabase {
				s.cfg.Logger.Warn("readiness check: the database did not answer", "err", rep.err)
			}
		}
		body, err := json.Marshal(rep)
		if err != nil {
			body = []byte(`{"status":"not_ready"}`)
		}
		writeProbe(w, r, status, body)
	})
}

func writeProbe(w http.ResponseWriter, r *http.Request, status int, body []byte) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		_, _ = w.Write(append(body, '\n'))
	}
}
