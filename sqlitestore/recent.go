package sqlitestore

import (
	"context"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// Recent commits: the commits this process's writer committed last, kept
// in memory as the log holds them, so that a short commit window (a
// push+pull round's pull, right after its push) is answered without
// reading the log. The writer publishes a batch's commits after its COMMIT
// and before it acknowledges any of its requests, so every commit a
// client was told about, and every commit a later partition read can
// name, is either here or was never published here.
//
// A window is answered from here only when every sequence of its range is
// here (the writer's sequences of a partition are consecutive, so counting
// them is enough); any gap (a commit of another process on the same file,
// a commit too large to keep, commits dropped for room) sends it to the
// log. The writer empties the ring when anything may have changed the
// logged commits under it: another connection committed (PRAGMA
// data_version, checked at each batch's start, while the batch holds the
// write lock), or one of its own writes pruned or rewrote the log.
//
// What is kept is what a read of the log returns, byte for byte: every
// string and payload copied out of the request (whose buffers are
// reused), scopes as stored. The answer is cut by store.CutWindow, as a
// shared read's is; its changes are shared, read-only, with other answers.
//
// The state after the window (StateAfter) is still read from the
// database, after the window was cut: the horizon recheck and the serve
// gate see what the log says now. Those reads join the request entries'
// shared reads (entry_share.go): one read transaction answers the entries
// and the states after asked while one of the partition is in flight.

// defaultRecentCommits is how many commits the ring holds by default (a
// short window is at most shortWindowCommits, and a round's reaches back
// to the client's previous round, a batch or two); defaultRecentBytes
// bounds their strings and payloads. Kept small: the ring is live heap
// that every GC cycle marks.
const (
	defaultRecentCommits = 1024
	defaultRecentBytes   = 1 << 20
)

// recentCommit is one published commit.
type recentCommit struct {
	partition string
	c         store.Commit
	size      int // bytes held by its arena
}

// recentCommits is the ring. The zero value keeps nothing.
type recentCommits struct {
	mu       sync.RWMutex
	ring     []recentCommit // circular: oldest at start, n in use
	start, n int
	bytes    int
	maxBytes int
}

func newRecentCommits(capacity, maxBytes int) *recentCommits {
	if capacity <= 0 {
		return nil
	}
	return &recentCommits{ring: make([]recentCommit, capacity), maxBytes: maxBytes}
}

// publish appends a committed batch's commits, oldest first; clear first
// empties the ring.
func (rc *recentCommits) publish(cs []recentCommit, clear bool) {
	if rc == nil || (len(cs) == 0 && !clear) {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if clear {
		clear := rc.ring
		for i := range clear {
			clear[i] = recentCommit{}
		}
		rc.start, rc.n, rc.bytes = 0, 0, 0
	}
	for _, c := range cs {
		if c.size > rc.maxBytes/8 {
			// Too large to keep: its sequence is a gap, and the windows
			// over it read the log.
			continue
		}
		for rc.n > 0 && (rc.n == len(rc.ring) || rc.bytes+c.size > rc.maxBytes) {
			rc.bytes -= rc.ring[rc.start].size
			rc.ring[rc.start] = recentCommit{}
			rc.start = (rc.start + 1) % len(rc.ring)
			rc.n--
		}
		rc.ring[(rc.start+rc.n)%len(rc.ring)] = c
		rc.n++
		rc.bytes += c.size
	}
}

// window answers q from the ring when every commit of its range is here.
func (rc *recentCommits) window(partition string, q store.CommitWindowQuery) (store.CommitWindow, bool) {
	if rc == nil {
		return store.CommitWindow{}, false
	}
	want := q.ThroughSeq - q.AfterSeq
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if want <= 0 || want > int64(rc.n) {
		return store.CommitWindow{}, false
	}
	// Walk back from the newest to the range's first commit: a round's
	// window ends at (or near) the newest.
	found, first := int64(0), -1
	for i := rc.n - 1; i >= 0 && found < want; i-- {
		e := &rc.ring[(rc.start+i)%len(rc.ring)]
		if e.partition != partition || e.c.Seq > q.ThroughSeq {
			continue
		}
		if e.c.Seq <= q.AfterSeq {
			break
		}
		found++
		first = i
	}
	if found != want {
		return store.CommitWindow{}, false
	}
	// Cut from the ring as it is: a round's window spans every client's
	// commit since the last pull, most of them outside the scopes asked.
	commits := func(yield func(store.Commit) bool) {
		for i := first; i < rc.n; i++ {
			e := &rc.ring[(rc.start+i)%len(rc.ring)]
			if e.partition != partition || e.c.Seq > q.ThroughSeq {
				continue
			}
			if c, ok := tableChanges(e.c, q.Table); ok && !yield(c) {
				return
			}
		}
	}
	return store.CutCommits(commits, nil, q), true
}

// tableChanges is c with only its changes of table; false when it has
// none.
func tableChanges(c store.Commit, table string) (store.Commit, bool) {
	n := 0
	for _, ch := range c.Changes {
		if ch.Table == table {
			n++
		}
	}
	switch n {
	case 0:
		return c, false
	case len(c.Changes):
		c.Changes = c.Changes[:n:n]
		return c, true
	}
	kept := make([]store.Change, 0, n)
	for _, ch := range c.Changes {
		if ch.Table == table {
			kept = append(kept, ch)
		}
	}
	c.Changes = kept
	return c, true
}

// keptCommit copies an appended commit out of the request's memory: its
// strings and payloads into one arena, its scopes as the log stores them
// (the change's own when they read back from their JSON as they are,
// else the scopes JSON the append wrote, decoded as a read decodes it).
func keptCommit(partition string, seq int64, nc store.NewCommit, scopes [][]byte) (recentCommit, error) {
	size := len(partition) + len(nc.ClientID) + len(nc.ClientCommitID) + len(nc.ActorID)
	for _, ch := range nc.Changes {
		size += len(ch.Table) + len(ch.RowID) + len(ch.Payload)
		for _, e := range ch.Scopes {
			size += len(e.Key) + len(e.Value)
		}
	}
	arena := make([]byte, 0, size)
	str := func(s string) string {
		if s == "" {
			return ""
		}
		at := len(arena)
		arena = append(arena, s...)
		return unsafe.String(&arena[at], len(s))
	}
	c := store.Commit{Seq: seq, CreatedAtMs: nc.CreatedAtMs, ActorID: str(nc.ActorID),
		ClientID: str(nc.ClientID), ClientCommitID: str(nc.ClientCommitID),
		Changes: make([]store.Change, len(nc.Changes))}
	held := size
	for i, ch := range nc.Changes {
		var sc wire.StoredScopes
		if storedAsIs(ch.Scopes) {
			// The strings are in the arena, which size counts.
			sc = make(wire.StoredScopes, len(ch.Scopes))
			for j, e := range ch.Scopes {
				sc[j] = wire.StoredScope{Key: str(e.Key), Value: str(e.Value)}
			}
			held += 32 * len(sc)
		} else {
			var err error
			if sc, err = store.DecodeScopes(scopes[i]); err != nil {
				return recentCommit{}, err
			}
			for _, s := range sc {
				held += len(s.Key) + len(s.Value) + 32
			}
		}
		out := store.Change{Table: str(ch.Table), RowID: str(ch.RowID), Op: ch.Op, Scopes: sc}
		if ch.Op == wire.OpUpsert {
			out.RowVersion = ch.RowVersion
		}
		if ch.Payload != nil {
			at := len(arena)
			arena = append(arena, ch.Payload...)
			out.Payload = arena[at:len(arena):len(arena)]
		}
		c.Changes[i] = out
	}
	return recentCommit{partition: str(partition), c: c, size: held + 64*len(c.Changes) + 96}, nil
}

// storedAsIs reports whether scopes read back from their JSON are the
// scopes themselves: keys in canonical order, each once, keys and values
// valid UTF-8 (which the JSON keeps as it is).
func storedAsIs(scopes wire.StoredScopes) bool {
	for i, e := range scopes {
		if i > 0 && wire.CompareKeys(scopes[i-1].Key, e.Key) >= 0 {
			return false
		}
		if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
			return false
		}
	}
	return true
}

// readStateAfter reads the partition's state and serve gate at running,
// in the request entries' shared reads (entry_share.go): an ask without a
// client.
func (s *Store) readStateAfter(ctx context.Context, partition string, running int32) (store.RequestState, error) {
	return s.readSharedState(ctx, partition, "", running)
}

// recentWindow answers a short window from the recent commits, with the
// state after it when q asks for it; false when the ring lacks a commit
// of its range.
func (s *Store) recentWindow(ctx context.Context, partition string, q store.CommitWindowQuery) (store.CommitWindow, bool, error) {
	win, ok := s.recent.window(partition, q)
	if !ok {
		return store.CommitWindow{}, false, nil
	}
	s.recentAnswers.Add(1)
	if q.StateAfter {
		st, err := s.readStateAfter(ctx, partition, q.Running)
		if err != nil {
			return store.CommitWindow{}, true, err
		}
		win.State = &st
	}
	return win, true, nil
}

// recentWindows answers ReadCommitWindows from the recent commits when
// every window is short and all of its commits are here, with one state
// read after all of them (at running, when set); false otherwise.
func (s *Store) recentWindows(ctx context.Context, partition string, qs []store.CommitWindowQuery, running *int32) ([]store.CommitWindow, bool, error) {
	out := make([]store.CommitWindow, len(qs))
	for i, q := range qs {
		if q.ThroughSeq <= q.AfterSeq {
			out[i] = store.CommitWindow{Complete: true}
			continue
		}
		if q.Bulk || q.ThroughSeq-q.AfterSeq > shortWindowCommits {
			return nil, false, nil
		}
		var ok bool
		if out[i], ok = s.recent.window(partition, q); !ok {
			return nil, false, nil
		}
	}
	s.recentAnswers.Add(int64(len(qs)))
	if running == nil {
		return out, true, nil
	}
	st, err := s.readStateAfter(ctx, partition, *running)
	if err != nil {
		return nil, true, err
	}
	for i, q := range qs {
		if q.StateAfter {
			c := st // each window its own copy
			out[i].State = &c
		}
	}
	return out, true, nil
}
