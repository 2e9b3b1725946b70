package sqlitestore

import (
	"context"

	"github.com/syncgo/syncgo/internal/shareread"
	"github.com/syncgo/syncgo/store"
)

// Shared short windows, as on Postgres (pgstore/window_share.go): the
// clients of a batch of push+pull rounds each read, right after the batch
// commits, the short window since their last round. While a short window
// read of a table and first scope key is in flight, the reads of the same
// table and key that arrive queue; when it ends, one read of the union of
// the queued ranges, for the union of their first key's values, answers
// all of them, each cut to its own range, its own scopes (every change
// checked against every key) and its own change limit (store.CutWindow).
// One read transaction instead of one per client: each begins with an
// empty page cache after a commit and reads every B-tree page it touches
// again.
//
// Each answer is what a read of its own would give: the shared read
// starts after every read it answers was queued, so it sees every commit
// of their ranges (a range ends at a commit that was durable and visible
// before the read was asked for), and the partition and serve gate it
// reads after its rows are read after each answer's rows too.

// shortWindowCommits is the longest range read as a short window.
const shortWindowCommits = 128

// maxSharedWindowCommits bounds the union range of a shared read; queued
// reads whose ranges lie further apart are read one by one.
const maxSharedWindowCommits = 4 * shortWindowCommits

type windowShares = shareread.Reads[store.CommitWindowQuery, store.CommitWindow]

// readSharedWindow answers a short window query, alone when no read of
// its key is in flight, else with the next shared read of its key.
func (s *Store) readSharedWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	return s.shares.Ask(ctx, s.sharedReadContext, store.ShareKey(partition, q), q, func(ctx context.Context, qs []store.CommitWindowQuery, reply func(int, store.CommitWindow, error)) {
		s.answerShares(ctx, partition, qs, reply)
	})
}

func (s *Store) sharedReadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return shareread.DetachedContext(ctx, s.done)
}

// answerShares answers qs, by one shared read when it can
// (store.AnswerShared).
func (s *Store) answerShares(ctx context.Context, partition string, qs []store.CommitWindowQuery, reply func(int, store.CommitWindow, error)) {
	n := store.AnswerShared(qs, maxSharedWindowCommits, func(q store.CommitWindowQuery) (store.CommitWindow, error) {
		return s.readCommitWindow(ctx, partition, q)
	}, reply)
	s.sharedAnswers.Add(int64(n))
}
