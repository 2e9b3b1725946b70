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
// seq and stores its reactions in the transaction; it returns how many.
func (a *applier) planReactions(ctx context.Context, seq, nowMs int64) (int, error) {
	e := a.r.e
	if !e.planning() {
		return 0, nil
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
		return 0, fmt.Errorf("reaction planner read: %w", rd.storeErr)
	}
	if err != nil {
		return 0, fmt.Errorf("reaction planner: %w", err)
	}
	if len(plans) == 0 {
		return 0, nil
	}
	rs, err := reaction.Prepare(plans, c.Origin, seq, nowMs, func(name string) bool { return rc.Handlers[name] != nil })
	if err != nil {
		return 0, fmt.Errorf("reaction planner: %w", err)
	}
	rt, ok := a.tx.(store.ReactionTx)
	if !ok {
		return 0, errors.New("reaction planner: the storage keeps no reactions")
	}
	if err := rt.EnqueueReactions(ctx, rs); err != nil {
		return 0, err
	}
	return len(rs), nil
}

// notePlanned wakes the reaction runner after a write that planned
// reactions is durable.
func (e *Engine) notePlanned(out pushOutcome) {
	if out.reactions > 0 && e.cfg.OnReactions != nil {
		e.cfg.OnReactions()
	}
}
