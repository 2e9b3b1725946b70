package engine

import (
	"context"
	"time"

	"github.com/syncgo/syncgo/store"
)

// The push-result journal prune (RetentionPolicy.PushResultsMaxAge) walks
// the journal's primary key in batches of pushResultsBatch rows, each its
// own short transaction, at most pushResultsPassRows rows per retention
// round; the position is kept between rounds, in the database (each
// batch stores its end), so successive rounds, of this process, of one
// restarted or of the other processes of a fleet, cover the whole journal
// and a round's work is bounded whatever its size.
// After each batch the prune waits pushResultsPause times as long as the
// batch took, so it takes at most a third of the store's time (of the
// SQLite writer's, the pushes' bottleneck) while it runs.
const (
	pushResultsBatch    = 2000
	pushResultsPassRows = 200_000
	pushResultsPause    = 2
)

// journalPosition is where the next journal prune batch starts: after
// the key, or at the journal's first row when nil. A resumed walk (the
// retention rounds') starts from the position stored in the database
// instead, the end of the last batch of any process, and stores its
// own; after is then only the fallback for a database without one.
type journalPosition struct {
	after  *store.PushResultKey
	resume bool
}

// PushResultsPruned is the number of push-result journal records the
// journal prunes deleted.
func (e *Engine) PushResultsPruned() int64 { return e.pushResultsPruned.Load() }

// prunePushResultsPass runs batches from pos until maxRows rows were
// examined, the journal's end was reached (pos then starts over), or
// another process holds the prune (Postgres). maxAge zero, or a store
// without a journal prune, does nothing.
func (e *Engine) prunePushResultsPass(ctx context.Context, pos *journalPosition, maxAge time.Duration, maxRows int64) (deleted int64, skipped bool, err error) {
	pr, ok := e.cfg.Store.(store.PushResultPruner)
	if maxAge <= 0 || !ok {
		return 0, false, nil
	}
	before := e.cfg.Now() - maxAge.Milliseconds()
	var (
		examined int64
		pause    time.Duration
	)
	for examined < maxRows {
		if examined > 0 {
			// The pause after the previous batch.
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return deleted, false, ctx.Err()
			case <-t.C:
			}
		}
		started := time.Now()
		var res store.PushResultPrune
		if pos.resume {
			res, err = pr.ResumePushResultsPrune(ctx, pos.after, before, pushResultsBatch)
		} else {
			res, err = pr.PrunePushResults(ctx, pos.after, before, pushResultsBatch)
		}
		pause = pushResultsPause * time.Since(started)
		if err != nil {
			return deleted, false, err
		}
		deleted += res.Deleted
		e.pushResultsPruned.Add(res.Deleted)
		if res.Skipped {
			return deleted, true, nil
		}
		examined += res.Examined
		if res.Done {
			pos.after = nil
			break
		}
		last := res.Last
		pos.after = &last
	}
	return deleted, false, nil
}

// PrunePushResults prunes the whole push-result journal once, from its
// first row to its last, deleting the records recorded more than
// pol.PushResultsMaxAge ago (raised to the policy's active window, as
// RetentionPolicy says); it returns how many it deleted. A zero or
// negative age deletes nothing;
// it stops early, without an error, when another process is pruning the
// journal (Postgres).
func (e *Engine) PrunePushResults(ctx context.Context, pol RetentionPolicy) (int64, error) {
	pol = withFloors(pol)
	var (
		pos     journalPosition
		deleted int64
	)
	for {
		n, skipped, err := e.prunePushResultsPass(ctx, &pos, pol.PushResultsMaxAge, pushResultsPassRows)
		deleted += n
		if err != nil || skipped || pos.after == nil {
			return deleted, err
		}
	}
}
