package engine

import (
	"context"
	"errors"
	"time"

	"github.com/syncgo/syncgo/hostapi"
	"github.com/syncgo/syncgo/store"
)

// RetentionPolicy is hostapi.RetentionPolicy.
type RetentionPolicy = hostapi.RetentionPolicy

// Floors of §4.6.
const (
	minActiveWindow   = 14 * 24 * time.Hour
	minAgeForce       = 30 * 24 * time.Hour
	minRetainedCommit = 1000
)

// withFloors applies the defaults and refuses values below the normative
// floors by raising them.
func withFloors(p RetentionPolicy) RetentionPolicy {
	p.ActiveWindow = max(p.ActiveWindow, minActiveWindow)
	p.AgeForce = max(p.AgeForce, minAgeForce)
	p.MinRetainedCommits = max(p.MinRetainedCommits, minRetainedCommit)
	switch {
	case p.PushResultsMaxAge < 0:
		p.PushResultsMaxAge = 0
	case p.PushResultsMaxAge > 0:
		p.PushResultsMaxAge = max(p.PushResultsMaxAge, p.ActiveWindow)
	}
	return p
}

// Prune runs one retention pass on a partition and returns its horizon.
// The log epoch is captured before the retention inputs are read, so a
// concurrent restore rotation makes the prune fail instead of deleting
// across timelines.
func (e *Engine) Prune(ctx context.Context, partition string, pol RetentionPolicy) (int64, error) {
	return e.prune(ctx, partition, withFloors(pol))
}

// PruneUnchecked is Prune without the normative floors, for conformance
// mode and tests, whose virtual clocks and small logs need them lower.
func (e *Engine) PruneUnchecked(ctx context.Context, partition string, pol RetentionPolicy) (int64, error) {
	return e.prune(ctx, partition, pol)
}

func (e *Engine) prune(ctx context.Context, partition string, pol RetentionPolicy) (int64, error) {
	st := e.cfg.Store
	p, err := st.Partition(ctx, partition)
	if err != nil {
		return 0, err
	}
	now := e.cfg.Now()
	through := p.MaxCommitSeq - pol.MinRetainedCommits
	if floor, ok, err := st.ActiveCursorFloor(ctx, partition, now-pol.ActiveWindow.Milliseconds()); err != nil {
		return 0, err
	} else if ok {
		through = min(through, floor)
	}
	old, err := st.CommitSeqBefore(ctx, partition, now-pol.AgeForce.Milliseconds())
	if err != nil {
		return 0, err
	}
	through = max(through, min(old, p.MaxCommitSeq-pol.MinRetainedCommits))
	if through <= p.HorizonSeq {
		return p.HorizonSeq, nil
	}
	res, err := st.PruneThrough(ctx, partition, p.LogEpoch, through)
	if err != nil {
		return 0, err
	}
	return res.HorizonSeq, nil
}

// RunRetention prunes every partition this process has served, every
// interval, until ctx ends. Failures are logged and retried next round.
// A partition idle (not served by this process) for longer than
// age_force, a touch interval and a round is forgotten once a round
// pruned it: everything written through this process is then older than
// age_force, so the prune removed all of it but the commits every log
// keeps (min_retained_commits), and no later round would remove more.
func (e *Engine) RunRetention(ctx context.Context, interval time.Duration, pol RetentionPolicy) {
	e.mu.Lock()
	e.retaining = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.retaining = false
		e.mu.Unlock()
	}()
	forgetAfter := (withFloors(pol).AgeForce + e.cfg.Limits.TouchInterval + interval).Milliseconds()
	journal := journalPosition{resume: true}
	t := time.NewTicker(interval)
	defer t.Stop()
	type served struct {
		id   string
		atMs int64
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		parts := make([]served, 0, len(e.touched))
		for p, st := range e.touched {
			parts = append(parts, served{p, st.atMs})
		}
		e.mu.Unlock()
		for _, p := range parts {
			now := e.cfg.Now()
			if _, err := e.Prune(ctx, p.id, pol); err != nil {
				if !errors.Is(err, store.ErrEpochMismatch) && ctx.Err() == nil {
					e.cfg.Logger.WarnContext(ctx, "retention pass failed", "partition", p.id, "err", err)
				}
				continue
			}
			if now-p.atMs > forgetAfter {
				e.mu.Lock()
				if st, ok := e.touched[p.id]; ok && st.atMs == p.atMs {
					delete(e.touched, p.id)
				}
				e.mu.Unlock()
			}
		}
		if ctx.Err() == nil {
			if _, _, err := e.prunePushResultsPass(ctx, &journal, withFloors(pol).PushResultsMaxAge, pushResultsPassRows); err != nil && ctx.Err() == nil {
				e.cfg.Logger.WarnContext(ctx, "push-result journal prune failed", "err", err)
			}
		}
	}
}
