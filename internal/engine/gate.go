package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// StreamResponder is a Responder that lets the engine hold the response
// back until its first bytes are verified against the serve gate: the
// transport commits to success (HTTP 200) only when the first chunk goes
// out, so a refusal found before that is still a request-level error.
type StreamResponder interface {
	Responder
	// BeginStream commits the transport and returns where the response
	// bytes go.
	BeginStream(version uint16) (io.Writer, error)
}

// gateDetails are the structured details of sync.schema_not_ready.
type gateDetails struct {
	Partition            string `json:"partition,omitempty"`
	Projection           string `json:"projection,omitempty"`
	LogEpochChanged      bool   `json:"logEpochChanged,omitempty"`
	StoredSchemaVersion  int32  `json:"storedSchemaVersion,omitempty"`
	RunningSchemaVersion int32  `json:"runningSchemaVersion,omitempty"`
	WriterFence          int32  `json:"writerFence,omitempty"`
}

func notReady(d gateDetails) *syncerr.Error {
	return syncerr.New(syncerr.CodeSchemaNotReady, "server schema is not ready for this request").WithDetails(d)
}

// gateRefusal decides on a serve gate (§2.4, §10.2): a newer stored schema
// refuses; so does a checkpoint at the running version that is not
// activated and not declared by this process.
func (e *Engine) gateRefusal(g store.ServeGate) *syncerr.Error {
	running := e.cfg.Schema.Version()
	if g.StoredSchemaVersion > running {
		return notReady(gateDetails{StoredSchemaVersion: g.StoredSchemaVersion, RunningSchemaVersion: running})
	}
	for _, p := range g.Pending {
		if !e.declared(p) {
			return notReady(gateDetails{Partition: p.Partition, Projection: p.Name})
		}
	}
	return nil
}

func (e *Engine) declared(ref store.CheckpointRef) bool {
	for _, d := range e.cfg.Declarations {
		if d.Partition == ref.Partition && d.Name == ref.Name && d.SchemaVersion == e.cfg.Schema.Version() {
			return true
		}
	}
	return false
}

// readGate reads the serve gate when the store has the barrier; nil
// otherwise.
func (e *Engine) readGate(ctx context.Context, partition string) (*store.ServeGate, error) {
	b, ok := e.cfg.Store.(store.Barrier)
	if !ok {
		return nil, nil
	}
	g, err := b.ReadServeGate(ctx, partition, e.cfg.Schema.Version())
	if err != nil {
		return nil, err
	}
	return &g, nil
}

// GateOpen reads the partition's serve gate and reports whether this
// process may serve the partition now (always for a store without the
// barrier). The realtime fan-out of commits other processes appended asks
// it after reading them: a commit a newer schema's process appended is
// in a layout this process does not serve.
func (e *Engine) GateOpen(ctx context.Context, partition string) (bool, error) {
	g, err := e.readGate(ctx, partition)
	if err != nil || g == nil {
		return err == nil, err
	}
	return e.gateRefusal(*g) == nil, nil
}

// entryGate runs the serve gate at request entry.
func (r *request) entryGate(ctx context.Context) error {
	var (
		g   *store.ServeGate
		err error
	)
	if r.pre != nil {
		g = &r.pre.Gate
	} else if g, err = r.e.readGate(ctx, r.auth.Partition); err != nil || g == nil {
		return err
	}
	if refusal := r.e.gateRefusal(*g); refusal != nil {
		return refusal
	}
	r.gate = g
	return nil
}

// txGate runs the serve gate inside a push transaction, after the
// partition lock: a migration that landed after the entry gate is caught
// before anything is written.
func (r *request) txGate(ctx context.Context, tx store.WriteTx) error {
	btx, ok := tx.(store.BarrierTx)
	if !ok || r.gate == nil {
		return nil
	}
	g, err := btx.ServeGate(ctx, r.e.cfg.Schema.Version())
	if err != nil {
		return err
	}
	if refusal := r.e.gateRefusal(g); refusal != nil {
		return refusal
	}
	return nil
}

// recheck reads the partition's state again after a section's window
// (§4.6). With a store that reads the serve gate in the same go, that gate
// is kept for the response's next read-verify: read after every row the
// response holds so far, it verifies them as a read at release would.
func (r *request) recheck(ctx context.Context) (store.Partition, error) {
	rs, ok := r.e.cfg.Store.(store.RequestStateReader)
	if !ok || r.gate == nil {
		return r.e.cfg.Store.Partition(ctx, r.auth.Partition)
	}
	st, err := rs.ReadRequestState(ctx, r.auth.Partition, "", r.e.cfg.Schema.Version())
	if err != nil {
		return store.Partition{}, err
	}
	r.gateAfterReads = &st.Gate
	return st.Partition, nil
}

// gateWriter re-reads the serve gate before each chunk of the response is
// released and refuses when the stored schema or the log epoch changed
// since the entry gate (the read-verify of the seeds, done per chunk so the
// response still streams).
type gateWriter struct {
	r       *request
	ctx     context.Context
	begin   func() (io.Writer, error)
	w       io.Writer
	bypass  bool
	refusal error
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if !g.bypass {
		if err := g.verify(); err != nil {
			g.refusal = err
			return 0, fmt.Errorf("%w: %w", wire.ErrNotWritten, err)
		}
	}
	if g.w == nil {
		w, err := g.begin()
		if err != nil {
			return 0, err
		}
		g.w = w
	}
	return g.w.Write(p)
}

// writeEncoded releases a whole response body already in the response's
// content coding (precompress.go), verified as a first chunk is.
func (g *gateWriter) writeEncoded(body []byte) error {
	if !g.bypass {
		if err := g.verify(); err != nil {
			g.refusal = err
			return fmt.Errorf("%w: %w", wire.ErrNotWritten, err)
		}
	}
	br, ok := g.r.resp.(BodyResponder)
	if g.w != nil || !ok {
		return errPreBody // never: usable checked both
	}
	w, err := br.BeginEncoded(g.r.req.Version)
	if err != nil {
		return err
	}
	g.w = w
	_, err = w.Write(body)
	return err
}

func (g *gateWriter) verify() error {
	entry := g.r.gate
	// A gate read after every row the response holds so far verifies
	// each chunk until the next section reads more.
	now := g.r.gateAfterReads
	if now == nil {
		var err error
		if now, err = g.r.e.readGate(g.ctx, g.r.auth.Partition); err != nil {
			return err
		}
	}
	if now == nil || entry == nil {
		return nil
	}
	if now.LogEpoch != entry.LogEpoch {
		return notReady(gateDetails{LogEpochChanged: true})
	}
	if now.StoredSchemaVersion != entry.StoredSchemaVersion {
		running := g.r.e.cfg.Schema.Version()
		return notReady(gateDetails{StoredSchemaVersion: now.StoredSchemaVersion, RunningSchemaVersion: running})
	}
	if refusal := g.r.e.gateRefusal(*now); refusal != nil {
		return refusal
	}
	return nil
}
