package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
)

// Durable reactions (§6.9): the planner runs once a new commit's every
// operation and validator accepted it, inside its candidate savepoint, and
// what it plans is stored in the same transaction as the commit and its
// result. A planner failure fails the push (nothing is recorded; the
// client retries); a replay runs nothing.

// wantsEvidence reports whether the operations of a commit are collected
// for a whole-commit callback: the commit validator or the planner.
func (e *Engine) wantsEvidence() bool {
	return e.cfg.CommitValidator != nil || e.planning()
}

func (e *Engine) planning() bool {
	return e.cfg.Reactions != nil && e.cfg.Reactions.Planner != nil
}

// planReactions runs the planner on the commit about to be recorded at
// seq and stores its reactions in the transaction; it returns them.
func (a *applier) planReactions(ctx context.Context, seq, nowMs int64) ([]store.NewReaction, error) {
	e := a.r.e
	if !e.planning() {
		return nil, nil
	}
	rc := e.cfg.Reactions
	rd := a.reader()
	c := &reaction.Commit{Origin: a.origin(), Seq: seq, CreatedAt: time.UnixMilli(nowMs), Operations: a.evidence, Tx: rd}
	var plans []reaction.Plan
	err := callHook(func() error {
		var err error
		plans, err = rc.Planner(ctx, c)
		return err
	})
	rd.done = true
	if rd.storeErr != nil {
		return nil, fmt.Errorf("reaction planner read: %w", rd.storeErr)
	}
	if err != nil {
		return nil, fmt.Errorf("reaction planner: %w", err)
	}
	if len(plans) == 0 {
		return nil, nil
	}
	rs, err := reaction.Prepare(plans, c.Origin, seq, nowMs, func(name string) bool { return rc.Handlers[name] != nil })
	if err != nil {
		return nil, fmt.Errorf("reaction planner: %w", err)
	}
	rt, ok := a.tx.(store.ReactionTx)
	if !ok {
		return nil, errors.New("reaction planner: the storage keeps no reactions")
	}
	if err := rt.EnqueueReactions(ctx, rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// notePlanned announces the reactions of a write that is durable
// (reaction.queued) and wakes the runner.
func (e *Engine) notePlanned(partition string, out pushOutcome) {
	if len(out.planned) == 0 {
		return
	}
	if rc := e.cfg.Reactions; rc != nil && rc.OnEvent != nil {
		for _, nr := range out.planned {
			reaction.Emit(rc.OnEvent, e.cfg.Logger, reaction.Event{Type: reaction.EventQueued, Partition: partition,
				IdempotencyKey: nr.IdempotencyKey, Name: nr.Type, At: time.UnixMilli(nr.CreatedAtMs)})
		}
	}
	if e.cfg.OnReactions != nil {
		e.cfg.OnReactions()
	}
}
