package engine

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// notePush reports a push outcome to Config.OnPushResult: the status the
// client was answered with, and whether a rejection was a conflict.
func (e *Engine) notePush(out pushOutcome) {
	if e.cfg.OnPushResult == nil {
		return
	}
	status := out.record.Status
	switch {
	case out.cacheMiss:
		status = wire.PushRejected
	case status == wire.PushApplied && out.replay:
		status = wire.PushCached
	}
	conflict := false
	if status == wire.PushRejected {
		for _, r := range out.record.Results {
			if r.Status == wire.OpConflict {
				conflict = true
				break
			}
		}
	}
	e.cfg.OnPushResult(status, conflict)
}

// PageCacheStats returns how many bootstrap page look-ups found a built
// (or building) page and how many built one.
func (e *Engine) PageCacheStats() (hits, misses int64) {
	return e.pages.hits.Load(), e.pages.misses.Load()
}

// CatchUpResets returns how many subscriptions far behind were answered
// reset instead of a replay (catchup.go).
func (e *Engine) CatchUpResets() int64 { return e.catchUpResets.Load() }

// GateStatus is the serve gate as a readiness probe reads it, without a
// partition: the stored schema version and the checkpoints pending at the
// running version.
type GateStatus struct {
	// Barrier is false for a store without the migration barrier; the
	// other fields are then zero.
	Barrier bool
	Gate    store.ServeGate
	// Running is the running schema version.
	Running int32
	// Newer is set when a newer schema version is stored: this process
	// must not serve.
	Newer bool
	// Blocking is a pending checkpoint this process did not declare, if
	// any: it must not serve until the checkpoint is activated.
	Blocking *store.CheckpointRef
}

// GateRefusal decides on a serve gate read elsewhere (a registered
// query reads it in its own snapshot): sync.schema_not_ready when this
// process must not serve, nil otherwise.
func (e *Engine) GateRefusal(g store.ServeGate) error {
	if refusal := e.gateRefusal(g); refusal != nil {
		return refusal
	}
	return nil
}

// ReadGateStatus reads the serve gate for a readiness probe (one query on
// a store with the barrier; a read of the schema marker otherwise, so that
// the call fails when the database does not answer).
func (e *Engine) ReadGateStatus(ctx context.Context) (GateStatus, error) {
	st := GateStatus{Running: e.cfg.Schema.Version()}
	g, err := e.readGate(ctx, "")
	if err != nil {
		return st, err
	}
	if g == nil {
		if _, err := e.cfg.Store.Marker(ctx); err != nil && !errors.Is(err, store.ErrNotFound) {
			return st, err
		}
		return st, nil
	}
	st.Barrier, st.Gate = true, *g
	st.Newer = g.StoredSchemaVersion > st.Running
	for _, p := range g.Pending {
		if !e.declared(p) {
			st.Blocking = &p
			break
		}
	}
	return st, nil
}
