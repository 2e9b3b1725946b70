package engine

import (
	"context"
	"errors"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// errRejected rolls the candidate writes of a rejected commit back.
var errRejected = errors.New("commit rejected")

// pushOutcome is what one PUSH_COMMIT came to.
type pushOutcome struct {
	record    store.PushRecord
	replay    bool // record came from the journal
	cacheMiss bool // the journal holds an unreadable record
	notice    *CommitNotice
	planned   []store.NewReaction // reactions the commit planned (reactions.go)
}

// maxGroupedCommits bounds the commits of a request applied in one Write
// (pushGrouped): a client flushing a long outbox holds the partition's
// write boundary for at most this many commits at a time, so the pushes
// of other clients interleave with it.
const maxGroupedCommits = 64

// pushCommits applies the request's PUSH_COMMITs in order and writes
// their PUSH_RESULTs. Runs of several commits go through the write
// boundary together (pushGrouped) when the store groups writes; a run
// that fails there is applied one commit at a time, as requests of one
// commit would be.
func (r *request) pushCommits(ctx context.Context) error {
	for rest := r.req.Commits; len(rest) > 0; {
		run := rest[:min(len(rest), maxGroupedCommits)]
		rest = rest[len(run):]
		if len(run) > 1 {
			done, err := r.pushGrouped(ctx, run)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		for _, c := range run {
			if err := r.pushCommit(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushGrouped applies commits, in order, in one Write: one transaction
// (with the other pushes the driver groups with it) instead of one per
// commit, and on Postgres their journal entries and rows read in its
// first round trip. Each commit is applied exactly as pushCommit applies
// it (applyCommit: the journal re-check, the candidate savepoint, a
// rejection recorded and the next commit applied), and the results are
// written once the transaction committed. When the Write fails, none of
// the commits was applied (the driver undid them all): done is false and
// the caller applies them one by one, so that a commit that fails still
// fails alone, after the commits before it were applied, as it would in
// requests of one commit. Stores that do not group writes (neither
// ReadAheadWriter nor LocalWriter) are left to the caller.
func (r *request) pushGrouped(ctx context.Context, commits []*wire.PushCommit) (done bool, err error) {
	st, partition, clientID := r.e.cfg.Store, r.auth.Partition, r.req.Header.ClientID
	ra, readAhead := st.(store.ReadAheadWriter)
	if _, local := st.(store.LocalWriter); !readAhead && !local {
		return false, nil
	}
	outs := make([]pushOutcome, len(commits))
	lastSeq := r.lastSeq
	apply := func(ctx context.Context, tx store.WriteTx) error {
		r.lastSeq = lastSeq
		for i, pc := range commits {
			out, err := r.applyCommit(ctx, tx, pc)
			if err != nil {
				return err
			}
			if out.replay {
				// Another actor's result fails the request at this
				// commit; the one-by-one replay of the run then leaves
				// the commits after it unattempted.
				if err := r.ownResult(out.record); err != nil {
					return err
				}
			}
			if out.record.Status == wire.PushApplied {
				// A no-op commit after it reports the log position this
				// one reached (applyCommit reads r.lastSeq).
				r.lastSeq = max(r.lastSeq, out.record.CommitSeq)
			}
			outs[i] = out
		}
		return nil
	}
	if readAhead {
		reads := store.WriteReads{ClientID: clientID, ClientCommitID: commits[0].ClientCommitID,
			MoreCommitIDs: make([]string, 0, len(commits)-1)}
		for i, pc := range commits {
			if i > 0 {
				reads.MoreCommitIDs = append(reads.MoreCommitIDs, pc.ClientCommitID)
			}
			for _, op := range pc.Operations {
				reads.Rows = append(reads.Rows, store.RowKey{Table: op.Table, RowID: op.RowID})
			}
		}
		err = ra.WriteReadAhead(ctx, partition, reads, apply)
	} else {
		err = st.Write(ctx, partition, apply)
	}
	if err != nil {
		r.lastSeq = lastSeq
		if ctxErr := ctx.Err(); ctxErr != nil {
			return true, ctxErr
		}
		return false, nil
	}
	// Every commit of the run is durable: each is announced even when
	// the response can no longer be written (a client gone mid-response).
	var werr error
	for i, out := range outs {
		if werr == nil {
			werr = r.writePushResult(commits[i].ClientCommitID, out)
		}
		r.announcePush(out)
	}
	return true, werr
}

// pushCommit applies one PUSH_COMMIT (§6) and writes its PUSH_RESULT.
func (r *request) pushCommit(ctx context.Context, pc *wire.PushCommit) error {
	st, partition, clientID := r.e.cfg.Store, r.auth.Partition, r.req.Header.ClientID
	var out pushOutcome
	ra, readAhead := st.(store.ReadAheadWriter)
	_, local := st.(store.LocalWriter)
	rec, err := store.PushRecord{}, store.ErrNotFound
	if !readAhead && !local {
		// A replay is answered without entering the write boundary. A
		// driver that reads ahead reads the journal in the transaction's
		// first round trip anyway (with the other pushes of its batch),
		// and a local writer's boundary costs no more than this read.
		rec, err = st.PushResult(ctx, partition, clientID, pc.ClientCommitID)
	}
	switch {
	case err == nil:
		if err := r.ownResult(rec); err != nil {
			return err
		}
		out = pushOutcome{record: rec, replay: true}
	case errors.Is(err, store.ErrUnreadable):
		out = pushOutcome{cacheMiss: true}
	case !errors.Is(err, store.ErrNotFound):
		return err
	default:
		apply := func(ctx context.Context, tx store.WriteTx) error {
			var err error
			out, err = r.applyCommit(ctx, tx, pc)
			return err
		}
		if readAhead {
			// The driver reads the journal re-check and the operations'
			// rows ahead, with those of the other pushes it groups.
			reads := store.WriteReads{ClientID: clientID, ClientCommitID: pc.ClientCommitID,
				Rows: make([]store.RowKey, len(pc.Operations))}
			for i := range pc.Operations {
				reads.Rows[i] = store.RowKey{Table: pc.Operations[i].Table, RowID: pc.Operations[i].RowID}
			}
			err = ra.WriteReadAhead(ctx, partition, reads, apply)
		} else {
			err = st.Write(ctx, partition, apply)
		}
		if store.ErrorCode(err) == store.CodeWriterFenceRejected {
			// A newer schema fenced this process off: nothing was
			// written, and the client retries against a newer server.
			d := gateDetails{RunningSchemaVersion: r.e.cfg.Schema.Version()}
			if g, gerr := r.e.readGate(ctx, partition); gerr == nil && g != nil {
				d.StoredSchemaVersion, d.WriterFence = g.StoredSchemaVersion, g.WriterFence
			}
			return notReady(d)
		}
		if err != nil {
			return err
		}
		if out.replay {
			if err := r.ownResult(out.record); err != nil {
				return err
			}
		}
	}
	return r.finishPush(pc.ClientCommitID, out)
}

// finishPush writes the PUSH_RESULT of a commit whose outcome is durable,
// counts it and announces an appended commit. The commit is announced
// whether or not its result could be written: it is in the log either
// way, and realtime would otherwise not deliver it until a later commit
// of the partition showed the gap.
func (r *request) finishPush(id string, out pushOutcome) error {
	err := r.writePushResult(id, out)
	r.announcePush(out)
	return err
}

// announcePush counts a durable outcome and announces its commit (to
// realtime, the reactions runner and the host's OnCommit).
func (r *request) announcePush(out pushOutcome) {
	r.e.notePush(out)
	r.e.notePlanned(r.auth.Partition, out)
	if out.record.Status == wire.PushApplied {
		r.lastSeq = max(r.lastSeq, out.record.CommitSeq)
	}
	if out.notice != nil && r.e.cfg.OnCommit != nil {
		r.e.cfg.OnCommit(*out.notice)
	}
}

// ownResult refuses a journal record another actor pushed: a replay is
// answered only to the actor that made the commit (a clientId rebound
// after its records were forgotten, such as at an epoch rotation, must not
// read the former actor's results).
func (r *request) ownResult(rec store.PushRecord) error {
	if rec.ActorID != "" && rec.ActorID != r.auth.ActorID {
		return errClientBound()
	}
	return nil
}

// applyCommit runs under the partition write boundary: the idempotency
// re-check, then the operations in a candidate savepoint, then the commit
// append or the durable rejection.
func (r *request) applyCommit(ctx context.Context, tx store.WriteTx, pc *wire.PushCommit) (pushOutcome, error) {
	if err := r.txGate(ctx, tx); err != nil {
		return pushOutcome{}, err
	}
	clientID := r.req.Header.ClientID
	rec, err := tx.PushResult(ctx, clientID, pc.ClientCommitID)
	switch {
	case err == nil:
		return pushOutcome{record: rec, replay: true}, nil
	case errors.Is(err, store.ErrUnreadable):
		return pushOutcome{cacheMiss: true}, nil
	case !errors.Is(err, store.ErrNotFound):
		return pushOutcome{}, err
	}
	if r.build != nil { // a server command (command.go)
		if pc, err = r.commandCommit(ctx, tx, pc); err != nil {
			return pushOutcome{}, err
		}
	}
	now := r.e.cfg.Now()
	a := &applier{r: r, tx: tx, commitID: pc.ClientCommitID}
	var (
		rej *rejection
		out pushOutcome
	)
	err = tx.Candidate(ctx, func(ctx context.Context) error {
		var err error
		if rej, err = a.apply(ctx, pc.Operations); err != nil {
			return err
		}
		if rej != nil {
			return errRejected
		}
		if len(a.changes) == 0 {
			// Every operation was a no-op (deletes of absent rows): the
			// commit is applied but appends nothing, since a commit holds
			// one or more changes (§2.1). Its commitSeq is the log
			// position it was applied at: the newest commit this request
			// knows of, which already reflects it.
			out.record = store.PushRecord{Status: wire.PushApplied, CommitSeq: max(r.partition.MaxCommitSeq, r.lastSeq),
				RecordedAtMs: now, CacheIdentity: randomEpoch(), ActorID: r.auth.ActorID, Results: a.results}
			if out.planned, err = a.planReactions(ctx, out.record.CommitSeq, now); err != nil {
				return err
			}
			_, err := tx.PutPushResult(ctx, clientID, pc.ClientCommitID, out.record)
			return err
		}
		nc := store.NewCommit{ClientID: clientID, ClientCommitID: pc.ClientCommitID,
			ActorID: r.auth.ActorID, CreatedAtMs: now, Changes: a.changes}
		seq, err := tx.AppendCommit(ctx, nc)
		if err != nil {
			return err
		}
		if out.planned, err = a.planReactions(ctx, seq, now); err != nil {
			return err
		}
		out.record = store.PushRecord{Status: wire.PushApplied, CommitSeq: seq, RecordedAtMs: now,
			CacheIdentity: randomEpoch(), ActorID: r.auth.ActorID, Results: a.results}
		if _, err := tx.PutPushResult(ctx, clientID, pc.ClientCommitID, out.record); err != nil {
			return err
		}
		// Every appended commit is announced: realtime fan-out orders
		// notifications by sequence and would otherwise wait for it.
		out.notice = &CommitNotice{Partition: r.auth.Partition, Seq: seq, CreatedAtMs: now,
			ActorID: r.auth.ActorID, Changes: a.changes}
		return nil
	})
	if err == nil {
		return out, nil
	}
	if !errors.Is(err, errRejected) {
		return pushOutcome{}, err
	}
	out = pushOutcome{record: store.PushRecord{Status: wire.PushRejected, RecordedAtMs: now,
		CacheIdentity: randomEpoch(), ActorID: r.auth.ActorID, Results: []wire.OpResult{rej.result}}}
	if rej.details != nil {
		out.record.Details = []wire.DetailEntry{*rej.details}
	}
	if _, err := tx.PutPushResult(ctx, clientID, pc.ClientCommitID, out.record); err != nil {
		return pushOutcome{}, err
	}
	return out, nil
}

// writePushResult writes the PUSH_RESULT (and details) of an outcome.
func (r *request) writePushResult(id string, out pushOutcome) error {
	if out.cacheMiss {
		ent, _ := syncerr.Lookup(syncerr.CodeIdempotencyCacheMiss)
		return r.enc.Encode(&wire.PushResult{ClientCommitID: id, Status: wire.PushRejected, Results: []wire.OpResult{{
			OpIndex: 0, Status: wire.OpError, Code: syncerr.CodeIdempotencyCacheMiss,
			Message: "the stored result of this commit cannot be read", Retryable: ent.Retryable}}})
	}
	rec := out.record
	pr := &wire.PushResult{ClientCommitID: id, Status: rec.Status, CommitSeq: rec.CommitSeq, Results: rec.Results}
	if rec.Status == wire.PushApplied && out.replay {
		pr.Status = wire.PushCached
	}
	if r.req.Version < wire.Version3 {
		// Versions 1 and 2 have no conflictColumns and no declared
		// references: their closed catalog answers a foreign-key failure
		// with sync.constraint_violation (version 2 §10.2). Nor have they
		// sync.row_deleted, which a version 3 push recorded and a retry of
		// the same commit at an older version replays from the journal:
		// it is the not-found code of an upsert whose row is absent,
		// sync.row_missing.
		results := make([]wire.OpResult, len(rec.Results))
		copy(results, rec.Results)
		for i := range results {
			results[i].ConflictColumns = nil
			switch results[i].Code {
			case syncerr.CodeReferenceViolation:
				results[i].Code = syncerr.CodeConstraintViolation
			case syncerr.CodeRowDeleted:
				results[i].Code = syncerr.CodeRowMissing
			}
		}
		pr.Results = results
	}
	if err := r.enc.Encode(pr); err != nil {
		return err
	}
	if rec.Status == wire.PushRejected && len(rec.Details) > 0 {
		return r.enc.Encode(&wire.PushResultDetails{ClientCommitID: id, Entries: rec.Details})
	}
	return nil
}
