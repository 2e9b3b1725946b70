package engine

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Command is a server-authoritative command (REMOTE.md §3): one ordinary
// commit whose operations the server builds inside the push transaction.
// It goes through the push path of a client commit (§6): the idempotency
// journal, the serve gate, scope authorization, conflicts, references,
// the commit log, its reactions' announcement and OnCommit.
type Command struct {
	Auth Auth
	// ClientID and ClientCommitID are the commit's idempotency identity;
	// the caller derives them in the server-command namespace (§1.5), so
	// no client's ids can collide with them.
	ClientID       string
	ClientCommitID string
	// Allowed are the actor's resolved scopes (§3.4).
	Allowed map[string][]string
	// Build returns the commit's operations (wire version 3 payloads). It
	// runs under the partition's write boundary, after the idempotency
	// re-check, and reads through tx; it is not run for a commit the
	// journal already holds. Its error aborts the transaction: nothing is
	// written or recorded, and RunCommand returns it. It may run again, in
	// a new transaction, when the database connection was lost before the
	// first one committed, or when the COMMIT's outcome is unknown and the
	// first one did not commit: only its last run's operations are written.
	Build func(ctx context.Context, tx store.WriteTx) ([]wire.Operation, error)
}

// CommandOutcome is what a command came to.
type CommandOutcome struct {
	// Status is PushApplied, PushCached (an applied result replayed from
	// the journal) or PushRejected (a fresh or a replayed rejection).
	Status    wire.PushStatus
	CommitSeq int64
	Results   []wire.OpResult
}

// RunCommand applies a command. A journal record that cannot be read is
// returned as the same rejection a push gets (sync.idempotency_cache_miss).
func (e *Engine) RunCommand(ctx context.Context, c Command) (CommandOutcome, error) {
	r := &request{e: e, auth: c.Auth, cs: e.cfg.Schema, allowed: c.Allowed, resolveOK: true, build: c.Build,
		req: &wire.Request{Version: wire.Version3, Header: &wire.ReqHeader{ClientID: c.ClientID, SchemaVersion: e.cfg.Schema.Version()}}}
	p, err := e.touchPartition(ctx, c.Auth.Partition)
	if err != nil {
		return CommandOutcome{}, err
	}
	r.partition = p
	if err := r.entryGate(ctx); err != nil {
		return CommandOutcome{}, err
	}
	pc := &wire.PushCommit{ClientCommitID: c.ClientCommitID}
	st := e.cfg.Store
	var out pushOutcome
	rec, err := st.PushResult(ctx, p.ID, c.ClientID, c.ClientCommitID)
	switch {
	case err == nil:
		out = pushOutcome{record: rec, replay: true}
	case errors.Is(err, store.ErrUnreadable):
		out = pushOutcome{cacheMiss: true}
	case !errors.Is(err, store.ErrNotFound):
		return CommandOutcome{}, err
	default:
		// The driver may run apply more than once (store.Store.Write):
		// again from the start when the connection was lost before the
		// COMMIT, and, since the journal key is named (WriteReadAhead),
		// also when the COMMIT's outcome is unknown. The run again then
		// re-checks the journal first: a record there is this request's
		// own when it carries the random CacheIdentity one of its earlier
		// runs wrote (that run committed after all), and the command is
		// answered as that run applied it; any other record is a replay.
		var fresh []pushOutcome
		apply := func(ctx context.Context, tx store.WriteTx) error {
			var err error
			out, err = r.applyCommit(ctx, tx, pc)
			if err != nil {
				return err
			}
			if !out.replay && !out.cacheMiss {
				fresh = append(fresh, out)
				return nil
			}
			for _, f := range fresh {
				if out.replay && f.record.CacheIdentity != "" && f.record.CacheIdentity == out.record.CacheIdentity {
					out = f
					break
				}
			}
			return nil
		}
		if ra, ok := st.(store.ReadAheadWriter); ok {
			err = ra.WriteReadAhead(ctx, p.ID, store.WriteReads{ClientID: c.ClientID, ClientCommitID: c.ClientCommitID}, apply)
		} else {
			err = st.Write(ctx, p.ID, apply)
		}
		if store.ErrorCode(err) == store.CodeWriterFenceRejected {
			return CommandOutcome{}, notReady(gateDetails{RunningSchemaVersion: e.cfg.Schema.Version()})
		}
		if err != nil {
			return CommandOutcome{}, err
		}
	}
	if out.cacheMiss {
		return CommandOutcome{Status: wire.PushRejected, Results: []wire.OpResult{cacheMissResult()}}, nil
	}
	e.notePlanned(c.Auth.Partition, out)
	if out.notice != nil && e.cfg.OnCommit != nil {
		e.cfg.OnCommit(*out.notice)
	}
	res := CommandOutcome{Status: out.record.Status, CommitSeq: out.record.CommitSeq, Results: out.record.Results}
	if res.Status == wire.PushApplied && out.replay {
		res.Status = wire.PushCached
	}
	if res.Status == wire.PushRejected {
		res.CommitSeq = 0
	}
	return res, nil
}

// commandCommit is the hook of applyCommit for a command: the commit's
// operations are built now, under the write boundary.
func (r *request) commandCommit(ctx context.Context, tx store.WriteTx, pc *wire.PushCommit) (*wire.PushCommit, error) {
	ops, err := r.build(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &wire.PushCommit{ClientCommitID: pc.ClientCommitID, Operations: ops}, nil
}

// cacheMissResult is the rejection of a commit whose journal record
// cannot be read (as writePushResult renders it).
func cacheMissResult() wire.OpResult {
	ent, _ := syncerr.Lookup(syncerr.CodeIdempotencyCacheMiss)
	return wire.OpResult{OpIndex: 0, Status: wire.OpError, Code: syncerr.CodeIdempotencyCacheMiss,
		Message: "the stored result of this commit cannot be read", Retryable: ent.Retryable}
}
