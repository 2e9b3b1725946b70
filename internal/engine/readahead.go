package engine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// A catch-up pulls the log window after window, one request after the
// other: while the client reads a window, the server would sit idle, and
// the next request's cursor is already known (the window's last
// sequence). The read-ahead reads that next window in the background as
// soon as a window that the limit cut short is read, and the client's
// next request takes it instead of reading it again, if it asks for
// exactly that window.
//
// What a taken window is checked against is what a window read by the
// request itself is checked against: the request's entry checks (epoch,
// horizon, serve gate, effective scopes) all ran as usual, and the window
// is used only when
//   - it is the same query: partition, actor, client, table, effective
//     scopes (the request's, computed now), cursor and change limit;
//   - it was read under the log epoch the request was served under
//     (epochs never repeat, so the epoch did not change in between: the
//     commits of one epoch never change, only pruning removes them);
//   - its bound is this request's, or below it with the window cut short
//     by the limit (a later bound then reads the same commits);
//   - the partition and the serve gate were read after every row of the
//     window (the horizon recheck of §4.6 and the read-verify): by the
//     request's entry, when the read finished before it; else by the read
//     itself, after its rows (StateAfter, in the window's round trip on
//     Postgres, its read transaction on SQLite), when the request asked
//     for that too; otherwise the request reads them again after it.
//
// A window is taken once; a request that does not match drops it. It is
// kept for readAheadTTL at most, and at most maxReadAheads windows exist
// at once, all clients together (each at most one window's limit of
// changes, and of readAheadMaxBytes of row payloads), of which at most
// maxReadingAhead are being read. A window may also hold its response
// body, encoded and compressed ahead (precompress.go), of at most
// preBodyMaxBytes.
type readAhead struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	closed  bool
	reading int // reads in flight
	wg      sync.WaitGroup
	entries map[aheadKey]*aheadWindow
	// read counts the windows read ahead, used those a request took,
	// precompressed those answered with the body compressed ahead.
	read, used, precompressed atomic.Int64
	// bufs are the scratch buffers of the bodies' uncompressed messages.
	bufs sync.Pool
}

// maxReadAheads bounds the windows held or being read at once, and
// maxReadingAhead the reads in flight (each holds a database connection,
// which the requests need more).
const (
	maxReadAheads   = 8
	maxReadingAhead = 2
)

// readAheadTTL is how long a read-ahead window waits for its request.
const readAheadTTL = 2 * time.Second

// readAheadMaxBytes bounds the row payloads of a window kept for its
// request: a larger one (a window of big rows) is dropped once read, and
// the request reads it itself.
const readAheadMaxBytes = 4 << 20

// errReadAheadTooLarge marks a window read ahead that was not kept.
var errReadAheadTooLarge = errors.New("read-ahead window too large to keep")

type aheadKey struct {
	partition, actor, client string
}

type aheadWindow struct {
	q     store.CommitWindowQuery
	epoch string
	timer *time.Timer
	// pre, when set, is what the window's response body is compressed
	// ahead for.
	pre *preSpec
	// done is closed when the read ended and the body was built; win,
	// err, body and doneAt (when the read ended) are set before.
	done   chan struct{}
	win    store.CommitWindow
	err    error
	body   *preBody
	doneAt time.Time
}

func newReadAhead() *readAhead {
	ctx, cancel := context.WithCancel(context.Background())
	return &readAhead{ctx: ctx, cancel: cancel, entries: map[aheadKey]*aheadWindow{}}
}

// start begins reading window q for the key in the background, unless the
// read-ahead is stopped or full. A window held for the key is replaced.
// With pre set, the window's response body is also encoded and compressed
// once it is read.
func (ra *readAhead) start(s store.Store, k aheadKey, q store.CommitWindowQuery, epoch string, pre *preSpec) {
	// StateAfter stays as the request asked: the state read after the
	// window's rows spares the next request a recheck when the window
	// ends after that request's entry (the usual case: the client asks
	// for the next window as soon as it has read this one).
	q.Scopes = cloneScopes(q.Scopes)
	a := &aheadWindow{q: q, epoch: epoch, pre: pre, done: make(chan struct{})}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if old, ok := ra.entries[k]; ok {
		ra.dropLocked(k, old)
	}
	if ra.closed || len(ra.entries) >= maxReadAheads || ra.reading >= maxReadingAhead {
		return
	}
	ra.entries[k] = a
	a.timer = time.AfterFunc(readAheadTTL, func() {
		ra.mu.Lock()
		defer ra.mu.Unlock()
		if ra.entries[k] == a {
			ra.dropLocked(k, a)
		}
	})
	ra.wg.Add(1)
	ra.read.Add(1)
	ra.reading++
	go func() {
		defer ra.wg.Done()
		a.win, a.err = s.ReadCommitWindow(ra.ctx, k.partition, a.q)
		if a.err == nil && payloadBytes(a.win) > readAheadMaxBytes {
			a.win, a.err = store.CommitWindow{}, errReadAheadTooLarge
		}
		a.doneAt = time.Now() // the rows (and the state after them) were read
		if a.err == nil && a.pre != nil {
			buf, _ := ra.bufs.Get().(*bytes.Buffer)
			if buf == nil {
				buf = new(bytes.Buffer)
			}
			a.body = a.pre.build(a.win, a.q, buf)
			ra.bufs.Put(buf)
		}
		close(a.done)
		ra.mu.Lock()
		ra.reading--
		ra.mu.Unlock()
	}()
}

func (ra *readAhead) dropLocked(k aheadKey, a *aheadWindow) {
	delete(ra.entries, k)
	if a.timer != nil {
		a.timer.Stop()
	}
}

// take returns the window read ahead for the key when it answers q under
// epoch, waiting for its read if it is still running, and when it ended,
// with its body compressed ahead if it has one (which the request checks
// before it uses it: usable). The window's State is kept only when both
// the read and q asked for it at the same running version. Whatever the
// key held is dropped.
func (ra *readAhead) take(ctx context.Context, k aheadKey, q store.CommitWindowQuery, epoch string) (store.CommitWindow, *preBody, time.Time, bool) {
	ra.mu.Lock()
	a, ok := ra.entries[k]
	if ok {
		ra.dropLocked(k, a)
	}
	ra.mu.Unlock()
	if !ok || a.epoch != epoch || a.q.Table != q.Table || a.q.AfterSeq != q.AfterSeq ||
		a.q.LimitChanges != q.LimitChanges || a.q.ThroughSeq > q.ThroughSeq || !sameScopes(a.q.Scopes, q.Scopes) {
		return store.CommitWindow{}, nil, time.Time{}, false
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return store.CommitWindow{}, nil, time.Time{}, false
	}
	if a.err != nil || (a.q.ThroughSeq != q.ThroughSeq && a.win.Complete) {
		return store.CommitWindow{}, nil, time.Time{}, false
	}
	ra.used.Add(1)
	win := a.win
	if !q.StateAfter || !a.q.StateAfter || a.q.Running != q.Running {
		win.State = nil // not the state this request would read
	}
	return win, a.body, a.doneAt, true
}

// stop cancels the reads in flight, waits for them to end and starts no
// more.
func (ra *readAhead) stop() {
	ra.mu.Lock()
	ra.closed = true
	for k, a := range ra.entries {
		ra.dropLocked(k, a)
	}
	ra.mu.Unlock()
	ra.cancel()
	ra.wg.Wait()
}

// payloadBytes is the size of a window's row payloads.
func payloadBytes(w store.CommitWindow) int {
	n := 0
	for _, c := range w.Commits {
		for _, ch := range c.Changes {
			n += len(ch.Payload)
		}
	}
	return n
}

func sameScopes(a, b wire.ScopeMap) bool {
	return slices.EqualFunc(a, b, func(x, y wire.ScopeValues) bool {
		return x.Key == y.Key && slices.Equal(x.Values, y.Values)
	})
}

func cloneScopes(m wire.ScopeMap) wire.ScopeMap {
	out := make(wire.ScopeMap, len(m))
	for i, e := range m {
		out[i] = wire.ScopeValues{Key: e.Key, Values: slices.Clone(e.Values)}
	}
	return out
}

// StopReadAhead cancels the windows being read ahead and waits for their
// reads to end; none start after it. Call it before closing the store.
func (e *Engine) StopReadAhead() { e.ahead.stop() }

// ReadAheadStats returns how many commit windows were read ahead, how
// many of them a request used, and how many of those it answered with the
// body compressed ahead.
func (e *Engine) ReadAheadStats() (read, used, precompressed int64) {
	return e.ahead.read.Load(), e.ahead.used.Load(), e.ahead.precompressed.Load()
}
