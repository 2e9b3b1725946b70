package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// ReadCommitWindows implements store.CommitWindowBatcher: the short
// windows among qs (at most s.shortWindow commits, the windows of a pull
// round's subscriptions) are read by one statement each (sqlShortWindow),
// all sent in one round trip, with the partition and serve gate read once
// after all their rows when the queries ask for StateAfter; that state is
// every such window's State, and the State of the windows that span no
// commit. A longer window, or a short one whose read reached its row
// limit, is read afterwards by ReadCommitWindow, with a state of its own.
func (s *Store) ReadCommitWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	return retry(s, ctx, "ReadCommitWindows", func() ([]store.CommitWindow, error) { return s.readCommitWindowsOnce(ctx, partition, qs) })
}

// readCommitWindowsOnce is ReadCommitWindows, once (see "Lost connections", retry.go).
func (s *Store) readCommitWindowsOnce(ctx context.Context, partition string, qs []store.CommitWindowQuery) ([]store.CommitWindow, error) {
	out := make([]store.CommitWindow, len(qs))
	b := &pgx.Batch{}
	var (
		batched []int // the queries read in the batch, in its order
		empty   []int // the queries that span no commit
		later   []int // the queries read one by one after it
		running *int32
	)
	for i, q := range qs {
		ts, err := s.table(q.Table)
		if err != nil {
			return nil, err
		}
		if len(q.Scopes) == 0 {
			return nil, scanRequiresScope()
		}
		first, _, ok := splitScopes(q.Scopes)
		if q.StateAfter {
			if running != nil && *running != q.Running {
				return nil, errors.New("pgstore: ReadCommitWindows: queries of different running versions")
			}
			running = &q.Running
		}
		switch {
		case !ok || q.ThroughSeq <= q.AfterSeq:
			out[i] = store.CommitWindow{Complete: true}
			empty = append(empty, i)
		case q.ThroughSeq-q.AfterSeq <= s.shortWindow:
			b.Queue(sqlShortWindow, partition, ts.name, q.AfterSeq, q.ThroughSeq, first.Key, first.Values, s.shortRows)
			batched = append(batched, i)
		default:
			later = append(later, i)
		}
	}
	if len(batched) > 0 || running != nil {
		if running != nil {
			queuePartitionState(b, partition, *running)
		}
		cut, err := s.readWindowBatch(ctx, partition, b, qs, batched, empty, out, running != nil)
		if err != nil {
			return nil, fmt.Errorf("read commit windows: %w", err)
		}
		later = append(later, cut...)
	}
	for _, i := range later {
		win, err := s.ReadCommitWindow(ctx, partition, qs[i])
		if err != nil {
			return nil, err
		}
		out[i] = win
	}
	return out, nil
}

// readWindowBatch reads the results of ReadCommitWindows's batch into out:
// the windows of qs[batched], then the state (when queued), given to the
// windows read and the empty ones whose query asked for it. It returns
// the queries whose read reached its row limit, to be read again.
func (s *Store) readWindowBatch(ctx context.Context, partition string, b *pgx.Batch, qs []store.CommitWindowQuery,
	batched, empty []int, out []store.CommitWindow, state bool) (cut []int, err error) {
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for _, i := range batched {
		q := qs[i]
		w := windowReader{limit: q.LimitChanges, scopes: q.Scopes}
		win, err := w.readShortResults(br, partition, q.Table, s.shortRows)
		if errors.Is(err, errShortWindowCut) {
			cut = append(cut, i)
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = win
	}
	if !state {
		return cut, nil
	}
	st, err := readPartitionState(br, partition)
	if err != nil {
		return nil, err
	}
	for _, i := range append(slices.Clone(batched), empty...) {
		if qs[i].StateAfter && !slices.Contains(cut, i) {
			c := st // each window its own copy
			out[i].State = &c
		}
	}
	return cut, nil
}
