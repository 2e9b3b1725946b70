package pgstore

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/syncgo/syncgo/store"
)

// Shared short windows: push+pull rounds of many clients subscribed to the
// same scopes end at about the same time (their pushes commit in one
// batch) and each reads the short window since its last round
// (readShortWindow), mostly the same commits. While a short window read of
// a table and scopes is in flight, the reads of the same table and scopes
// that arrive queue; when it ends, one read of the union of the queued
// ranges answers all of them, each cut to its own range and change limit.
//
// Each queued read gets what a read of its own would give: the shared read
// is sent after every read it answers was queued, so it sees every commit
// of their ranges (a range ends at a commit that was durable and visible
// before the read was asked for), and the partition and serve gate it reads
// after its rows are read after each answer's rows too. Only the changes of
// the same scopes are read (the group's key), and each answer's commits
// are those of its range: the union range's other commits are dropped.

// maxSharedWindowCommits bounds the union range of a shared read; queued
// reads whose ranges lie further apart are read one by one.
const maxSharedWindowCommits = 4 * shortWindowCommits

// windowShares are the short window reads queued or in flight, by key.
type windowShares struct {
	mu sync.Mutex
	m  map[string]*windowShare
}

// windowShare is the queue of one key; it exists while its reader runs.
type windowShare struct {
	queue []*windowAsk
}

// windowAsk is one queued read.
type windowAsk struct {
	q    store.CommitWindowQuery
	done chan windowAnswer // buffered: the reader never blocks
}

type windowAnswer struct {
	win store.CommitWindow
	err error
}

// shareKey identifies the reads one shared read answers: the partition,
// the table, the scopes (in their order) and the state read after.
func shareKey(partition string, q store.CommitWindowQuery) string {
	var b strings.Builder
	b.WriteString(partition)
	b.WriteByte(0)
	b.WriteString(q.Table)
	for _, sc := range q.Scopes {
		b.WriteByte(0)
		b.WriteString(sc.Key)
		for _, v := range sc.Values {
			b.WriteByte(1)
			b.WriteString(v)
		}
	}
	b.WriteByte(0)
	if q.StateAfter {
		b.WriteString(strconv.Itoa(int(q.Running)))
	}
	return b.String()
}

// readSharedWindow answers a short window query (at most s.shortWindow
// commits), alone when no read of its key is in flight, else with the next
// shared read of its key.
func (s *Store) readSharedWindow(ctx context.Context, partition, table string, q store.CommitWindowQuery) (store.CommitWindow, error) {
	key := shareKey(partition, q)
	ask := &windowAsk{q: q, done: make(chan windowAnswer, 1)}
	s.shares.mu.Lock()
	if s.shares.m == nil {
		s.shares.m = map[string]*windowShare{}
	}
	sh := s.shares.m[key]
	lead := sh == nil
	if lead {
		sh = &windowShare{}
		s.shares.m[key] = sh
	}
	sh.queue = append(sh.queue, ask)
	s.shares.mu.Unlock()
	if lead {
		go s.readShares(context.WithoutCancel(ctx), key, sh, partition, table)
	}
	select {
	case a := <-ask.done:
		return a.win, a.err
	case <-ctx.Done():
		return store.CommitWindow{}, ctx.Err()
	}
}

// readShares answers the queue of a key until it is empty, then removes
// it.
func (s *Store) readShares(ctx context.Context, key string, sh *windowShare, partition, table string) {
	for {
		s.shares.mu.Lock()
		asks := sh.queue
		sh.queue = nil
		if len(asks) == 0 {
			delete(s.shares.m, key)
			s.shares.mu.Unlock()
			return
		}
		s.shares.mu.Unlock()
		s.answerShares(ctx, partition, table, asks)
	}
}

// answerShares answers asks by one read of the union of their ranges, or
// one read each when that union is too long.
func (s *Store) answerShares(ctx context.Context, partition, table string, asks []*windowAsk) {
	lo, hi := asks[0].q.AfterSeq, asks[0].q.ThroughSeq
	for _, a := range asks[1:] {
		lo, hi = min(lo, a.q.AfterSeq), max(hi, a.q.ThroughSeq)
	}
	if len(asks) == 1 || hi-lo > maxSharedWindowCommits {
		for _, a := range asks {
			win, err := s.readOneShort(ctx, partition, table, a.q)
			a.done <- windowAnswer{win, err}
		}
		return
	}
	q := asks[0].q
	q.AfterSeq, q.ThroughSeq, q.LimitChanges = lo, hi, 0
	all, err := s.readOneShort(ctx, partition, table, q)
	s.sharedAnswers.Add(int64(len(asks)))
	for _, a := range asks {
		if err != nil {
			a.done <- windowAnswer{err: err}
			continue
		}
		a.done <- windowAnswer{win: cutWindow(all, a.q)}
	}
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

// cutWindow is the answer to q from a complete window over a range that
// holds q's: the commits of q's range, up to q's change limit (a commit
// is never split, and the first is kept whole), and the state read after
// them. The commits are shared, read-only, with the other answers.
func cutWindow(all store.CommitWindow, q store.CommitWindowQuery) store.CommitWindow {
	win := store.CommitWindow{Complete: true, State: all.State}
	if win.State != nil {
		st := *all.State // each answer its own copy
		win.State = &st
	}
	start := len(all.Commits)
	for i, c := range all.Commits {
		if c.Seq > q.AfterSeq {
			start = i
			break
		}
	}
	end, changes := start, 0
	for end < len(all.Commits) && all.Commits[end].Seq <= q.ThroughSeq {
		n := len(all.Commits[end].Changes)
		if q.LimitChanges > 0 && end > start && changes+n > q.LimitChanges {
			win.Complete = false
			break
		}
		changes += n
		end++
	}
	win.Commits = all.Commits[start:end:end]
	return win
}
