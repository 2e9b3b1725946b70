package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/schema"
)

// capabilities are the optional features of conformance-mode.md that work
// end to end; only these are advertised.
var capabilities = []string{"backup-restore", "blob-presign", "blobs", "crdt", "idempotency-fault", "validators", "commit-validators", "leases", "signed-urls"}

// maxControlBody caps a control request body.
const maxControlBody = 16 << 20

// Harness is the conformance-mode HTTP surface: the control routes under
// /__conformance/ and every instance's protocol routes under /i/{id}.
type Harness struct {
	logger *slog.Logger
	mux    *http.ServeMux
	// dbs makes an instance's databases; admin, when set, is the Postgres
	// pool they are made with, closed by Close.
	dbs   func(*schema.Compiled, *slog.Logger) (databases, error)
	admin *pgxpool.Pool

	mu        sync.Mutex
	instances map[string]*instance
	nextID    int
	closed    bool
}

// New returns a Harness with no instances, whose instances each run on
// SQLite files of their own.
func New(logger *slog.Logger) *Harness {
	return newHarness(logger, func(_ *schema.Compiled, l *slog.Logger) (databases, error) {
		return newSQLiteDatabases(l)
	})
}

// NewPostgres returns a Harness with no instances, whose instances each
// run on schemas of their own in the Postgres database at url (the
// connecting role creates and drops them). It checks the database first.
func NewPostgres(ctx context.Context, logger *slog.Logger, url string) (*Harness, error) {
	base, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	adminCfg := base.Copy()
	adminCfg.MaxConns = 2
	admin, err := pgxpool.NewWithConfig(ctx, adminCfg)
	if err == nil {
		err = admin.Ping(ctx)
		if err != nil {
			admin.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	h := newHarness(logger, func(sc *schema.Compiled, l *slog.Logger) (databases, error) {
		return newPGDatabases(admin, base, sc, l)
	})
	h.admin = admin
	return h, nil
}

func newHarness(logger *slog.Logger, dbs func(*schema.Compiled, *slog.Logger) (databases, error)) *Harness {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Harness{logger: logger, mux: http.NewServeMux(), dbs: dbs, instances: map[string]*instance{}}
	h.mux.HandleFunc("GET /__conformance/info", h.handleInfo)
	h.mux.HandleFunc("POST /__conformance/instances", h.handleCreate)
	h.mux.HandleFunc("DELETE /__conformance/instances/{id}", h.handleDelete)
	h.mux.HandleFunc("POST /__conformance/instances/{id}/call", h.handleCall)
	h.mux.HandleFunc("/i/{id}/{rest...}", h.handleMount)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Harness) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Close closes every instance; later creations fail.
func (h *Harness) Close() error {
	h.mu.Lock()
	insts := h.instances
	h.instances, h.closed = map[string]*instance{}, true
	h.mu.Unlock()
	var errs []error
	for _, in := range insts {
		errs = append(errs, in.close())
	}
	if h.admin != nil {
		h.admin.Close()
	}
	return errors.Join(errs...)
}

func (h *Harness) lookup(id string) *instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.instances[id]
}

func (h *Harness) handleInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"name": ServerName, "capabilities": slices.Clone(capabilities)})
}

func (h *Harness) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "conformance mode is shutting down")
		return
	}
	h.nextID++
	id := "inst-" + strconv.Itoa(h.nextID)
	h.mu.Unlock()
	in, status, err := newInstance(r.Context(), id, "http://"+r.Host, req, h.dbs, h.logger.With("instance", id))
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		in.close()
		writeError(w, http.StatusServiceUnavailable, "conformance mode is shutting down")
		return
	}
	h.instances[id] = in
	h.mu.Unlock()
	h.logger.Info("instance created", "instance", id, "partition", in.partition)
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "mount": in.mount})
}

func (h *Harness) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	h.mu.Lock()
	in := h.instances[id]
	delete(h.instances, id)
	h.mu.Unlock()
	if in == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no instance %q", id))
		return
	}
	if err := in.close(); err != nil {
		h.logger.Warn("instance close failed", "instance", id, "err", err)
	}
	h.logger.Info("instance closed", "instance", id)
	writeJSON(w, http.StatusOK, struct{}{})
}

// callRequest is the body of POST /__conformance/instances/{id}/call.
type callRequest struct {
	Method string            `json:"method"`
	Args   []json.RawMessage `json:"args"`
}

func (h *Harness) handleCall(w http.ResponseWriter, r *http.Request) {
	in := h.lookup(r.PathValue("id"))
	if in == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no instance %q", r.PathValue("id")))
		return
	}
	var req callRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	result, err := in.call(r.Context(), req.Method, req.Args)
	if err != nil {
		status := http.StatusInternalServerError
		var ce *callError
		if errors.As(err, &ce) {
			status = ce.status
		}
		writeError(w, status, fmt.Sprintf("%s: %v", req.Method, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result})
}

// handleMount serves an instance's protocol routes: whatever its
// syncgo.Server handler serves (POST /sync, GET /segments/{id}, and the
// realtime route once the server has one), relative to /i/{id}.
func (h *Harness) handleMount(w http.ResponseWriter, r *http.Request) {
	in := h.lookup(r.PathValue("id"))
	if in == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no instance %q", r.PathValue("id")))
		return
	}
	in.handler.ServeHTTP(w, r)
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(map[string]string{"error": "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
