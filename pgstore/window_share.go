package pgstore

import (
	"context"

	"github.com/syncgo/syncgo/internal/shareread"
	"github.com/syncgo/syncgo/store"
)

// Shared short windows: push+pull rounds of many clients end at about the
// same time (their pushes commit in one batch) and each reads the short
// window since its last round (readShortWindow) over mostly the same
// commits. While a short window read of a table and first scope key is in
// flight, the reads of the same table and key that arrive queue; when it
// ends, one read of the union of the queued ranges, for the union of their
// first key's values, answers all of them, each cut to its own range, its
// own scopes (store.MatchScopes on every change, all keys) and its own
// change limit.
//
// Each queued read gets what a read of its own would give: the shared read
// is sent after every read it answers was queued, so it sees every commit
// of their ranges (a range ends at a commit that was durable and visible
// before the read was asked for), and the partition and serve gate it reads
// after its rows are read after each answer's rows too. It reads every
// change that any of its reads may match (a superset of each one's), and
// each answer keeps only the changes of its own scopes and range.

// maxSharedWindowCommits bounds the union range of a shared read; queued
// reads whose ranges lie further apart are read one by one.
const maxSharedWindowCommits = 4 * shortWindowCommits

// windowShares are the short window reads queued or in flight, by key
// (store.ShareKey).
type windowShares = shareread.Reads[store.CommitWindowQuery, store.CommitWindow]

// readSharedWindow answers a short window query (at most s.shortWindow
// commits), alone when no read of its key is in flight, else with the next
// shared read of its key.
func (s *Store) readSharedWindow(ctx context.Context, partition, table string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	return s.shares.Ask(ctx, s.sharedReadContext, store.ShareKey(partition, q), q, func(ctx context.Context, qs []store.CommitWindowQuery, reply func(int, store.CommitWindow, error)) {
		s.answerShares(ctx, partition, table, qs, reply)
	})
}

// answerShares answers qs, by one shared read when it can
// (store.AnswerShared).
func (s *Store) answerShares(ctx context.Context, partition, table string, qs []store.CommitWindowQuery, reply func(int, store.CommitWindow, error)) {
	n := store.AnswerShared(qs, maxSharedWindowCommits, func(q store.CommitWindowQuery) (store.CommitWindow, error) {
		return s.readOneShort(ctx, partition, table, q)
	}, reply)
	s.sharedAnswers.Add(int64(n))
}

// readOneShort reads one short window (readShortWindow).
func (s *Store) readOneShort(ctx context.Context, partition, table string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	first, _, _ := splitScopes(q.Scopes)
	w := windowReader{limit: q.LimitChanges, scopes: q.Scopes}
	if q.StateAfter {
		w.running = &q.Running
	}
	return w.readShortWindow(ctx, s, partition, table, first, q.AfterSeq, q.ThroughSeq)
}
