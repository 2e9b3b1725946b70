package syncgo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncgo/syncgo/store"
)

// ErrBackfillSuperseded reports that a newer claimer took the checkpoint:
// this backfill wrote nothing in its last batch and stops.
var ErrBackfillSuperseded = errors.New("syncgo: backfill superseded by a newer claim")

// ErrBackfillUnverifiable reports that the log above the watermark was
// pruned: activation cannot prove the projection complete; the backfill
// must restart from the current rows at a watermark at or above the
// horizon.
var ErrBackfillUnverifiable = errors.New("syncgo: backfill unverifiable: the log above the watermark was pruned")

// BackfillProgress is reported after every batch.
type BackfillProgress struct {
	Watermark    int64 // source commits processed through here
	Target       int64 // the source coverage the backfill aims at
	ObservedRows int64
}

// Backfill describes one backfill run for a declared checkpoint.
type Backfill struct {
	Partition string
	Name      string
	// Sources are the tables the projection is derived from.
	Sources []string
	// BatchCommits bounds the source commits per batch. Default 500.
	BatchCommits int
	// Project derives projection rows from a batch of source commits,
	// writing them through tx: they commit together with the batch's
	// progress, or not at all when the claim was superseded. It returns
	// how many source rows it observed. Nil projects nothing (the log is
	// only walked and the checkpoint activated).
	Project func(ctx context.Context, tx store.WriteTx, commits []store.Commit) (int64, error)
	// Progress, when set, is called after each batch.
	Progress func(BackfillProgress)
	// Now is the clock in Unix milliseconds; default the wall clock.
	Now func() int64
}

// RunBackfill claims the checkpoint (a new owner epoch), processes the
// source log from the checkpoint's watermark (so an interrupted run
// resumes where it stopped) and activates it. A concurrent write to a
// source table makes activation stale: the run then catches up and tries
// again.
func RunBackfill(ctx context.Context, st store.Store, bf Backfill) (store.Checkpoint, error) {
	b, ok := st.(store.Barrier)
	if !ok {
		return store.Checkpoint{}, errors.New("syncgo: the store has no migration barrier")
	}
	if bf.BatchCommits <= 0 {
		bf.BatchCommits = 500
	}
	now := bf.Now
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	cp, err := b.ClaimCheckpoint(ctx, bf.Partition, bf.Name, now())
	if err != nil {
		return store.Checkpoint{}, fmt.Errorf("claim: %w", err)
	}
	if cp.State == store.CheckpointActivated {
		return cp, nil
	}
	watermark, observed := cp.Watermark, cp.ObservedRows
	for attempt := 0; ; attempt++ {
		target, err := b.SourceCoverageSeq(ctx, bf.Partition, bf.Sources)
		if err != nil {
			return cp, fmt.Errorf("coverage: %w", err)
		}
		for watermark < target {
			if err := ctx.Err(); err != nil {
				return cp, err
			}
			commits, err := st.ReadCommits(ctx, bf.Partition, watermark, target, bf.BatchCommits)
			if err != nil {
				return cp, fmt.Errorf("read source commits: %w", err)
			}
			// The horizon, read after the commits: past the watermark, the
			// read may have missed pruned commits, which the projection
			// then never saw; advancing over them would let activation
			// certify an incomplete projection.
			part, err := st.Partition(ctx, bf.Partition)
			if err != nil {
				return cp, fmt.Errorf("read horizon: %w", err)
			}
			if part.HorizonSeq > watermark {
				return cp, ErrBackfillUnverifiable
			}
			through := target
			if len(commits) == bf.BatchCommits {
				through = commits[len(commits)-1].Seq
			}
			sources := onlySources(commits, bf.Sources)
			// The function may run more than once (a driver runs a Write
			// again after a lost connection): what it counts is kept from
			// its last run only.
			var added int64
			err = st.Write(ctx, bf.Partition, func(ctx context.Context, tx store.WriteTx) error {
				var n int64
				if bf.Project != nil && len(sources) > 0 {
					var err error
					if n, err = bf.Project(ctx, tx, sources); err != nil {
						return err
					}
				}
				btx, ok := tx.(store.BarrierTx)
				if !ok {
					return errors.New("syncgo: the store's transactions have no migration barrier")
				}
				advanced, err := btx.AdvanceCheckpoint(ctx, bf.Name, cp.OwnerEpoch, through, observed+n, now())
				if err != nil {
					return err
				}
				if !advanced {
					return ErrBackfillSuperseded
				}
				added = n
				return nil
			})
			if err != nil {
				return cp, err
			}
			observed += added
			watermark = through
			if bf.Progress != nil {
				bf.Progress(BackfillProgress{Watermark: watermark, Target: target, ObservedRows: observed})
			}
		}
		act, err := b.ActivateCheckpoint(ctx, bf.Partition, bf.Name, cp.OwnerEpoch, watermark, bf.Sources, now())
		if err != nil {
			return cp, fmt.Errorf("activate: %w", err)
		}
		switch act {
		case store.Activated:
			cp.State, cp.Watermark, cp.ObservedRows = store.CheckpointActivated, watermark, observed
			return cp, nil
		case store.Unverifiable:
			return cp, ErrBackfillUnverifiable
		}
		// Stale: a source write above the watermark, or a newer claim.
		cps, err := b.ReadCheckpoints(ctx, bf.Partition)
		if err != nil {
			return cp, err
		}
		for _, c := range cps {
			if c.Name == bf.Name && c.OwnerEpoch != cp.OwnerEpoch {
				return cp, ErrBackfillSuperseded
			}
		}
		if attempt > 100 {
			return cp, errors.New("syncgo: backfill cannot catch up with source writes")
		}
	}
}

// onlySources keeps the source-table changes of commits.
func onlySources(commits []store.Commit, sources []string) []store.Commit {
	var out []store.Commit
	for _, c := range commits {
		var changes []store.Change
		for _, ch := range c.Changes {
			if slices.Contains(sources, ch.Table) {
				changes = append(changes, ch)
			}
		}
		if len(changes) > 0 {
			c.Changes = changes
			out = append(out, c)
		}
	}
	return out
}
