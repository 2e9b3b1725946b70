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
// A window is taken once; a request that does not match drops it. When a
// window read ahead is itself cut short by the limit, the window after it
// is read too, as soon as its rows are read (while its response body is
// built and the client still reads the window before): each key holds a
// chain of at most maxChain windows, the one its next request should ask
// for first. A request that takes the first keeps the rest; a request
// that asks for the window the chain already holds starts no other read.
// Every window of a chain is checked as any window is.
//
// A window is kept for readAheadTTL at most, and at most maxReadAheads
// windows are held at once, all clients together (each at most one
// window's limit of changes, and of readAheadMaxBytes of row payloads),
// of which at most maxReadingAhead are being read. A window may also hold
// its response body, encoded and compressed ahead (precompress.go), of
// at most preBodyMaxBytes.
type readAhead struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	closed  bool
	reading int // reads in flight
	held    int // windows in the chains
	wg      sync.WaitGroup
	entries map[aheadKey][]*aheadWindow
	// read counts the windows read ahead, used those a request took,
	// precompressed those answered with the body compressed ahead.
	read, used, precompressed atomic.Int64
	// bufs are the scratch buffers of the bodies' uncompressed messages.
	bufs sync.Pool
}

// maxReadAheads bounds the windows held or being read at once, and
// maxReadingAhead the reads in flight (each holds a database connection,
// which the requests need more). maxChain bounds a key's windows: the
// one its next request asks for and the one after it.
const (
	maxReadAheads   = 8
	maxReadingAhead = 2
	maxChain        = 2
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
	s     store.Store
	q     store.CommitWindowQuery
	epoch string
	timer *time.Timer
	// pre, when set, is what the window's response body is compressed
	// ahead for.
	pre *preSpec
	// taken is set when a request took the window, dropped when it left
	// its chain otherwise, ended when its read ended (under readAhead.mu).
	taken, dropped, ended bool
	// done is closed when the read ended and the body was built; win,
	// err, body and doneAt (when the read ended) are set before.
	done   chan struct{}
	win    store.CommitWindow
	err    error
	body   *preBody
	doneAt time.Time
}

// answers reports whether the window, read ahead under its epoch, is the
// one q asks for under epoch, as far as the query goes (take checks the
// window read against q's bound).
func (a *aheadWindow) answers(q store.CommitWindowQuery, epoch string) bool {
	return a.epoch == epoch && a.q.Table == q.Table && a.q.AfterSeq == q.AfterSeq &&
		a.q.LimitChanges == q.LimitChanges && a.q.ThroughSeq <= q.ThroughSeq && sameScopes(a.q.Scopes, q.Scopes)
}

func newReadAhead() *readAhead {
	ctx, cancel := context.WithCancel(context.Background())
	return &readAhead{ctx: ctx, cancel: cancel, entries: map[aheadKey][]*aheadWindow{}}
}

// start begins reading window q for the key in the background, unless the
// key's chain already begins with it, its body compressed ahead for pre,
// or the read-ahead is stopped or full. Another chain held for the key is
// dropped. With pre set, the window's response body is also encoded and
// compressed once it is read.
func (ra *readAhead) start(s store.Store, k aheadKey, q store.CommitWindowQuery, epoch string, pre *preSpec) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if chain := ra.entries[k]; len(chain) > 0 {
		if chain[0].answers(q, epoch) && chain[0].pre.same(pre) {
			return
		}
		ra.dropLocked(k)
	}
	// StateAfter stays as the request asked: the state read after the
	// window's rows spares the next request a recheck when the window
	// ends after that request's entry (the usual case: the client asks
	// for the next window as soon as it has read this one).
	q.Scopes = cloneScopes(q.Scopes)
	ra.launchLocked(s, k, q, epoch, pre)
}

// launchLocked appends a read of window q to the key's chain and starts
// it, unless the read-ahead is stopped or full.
func (ra *readAhead) launchLocked(s store.Store, k aheadKey, q store.CommitWindowQuery, epoch string, pre *preSpec) {
	if ra.closed || ra.held >= maxReadAheads || ra.reading >= maxReadingAhead || len(ra.entries[k]) >= maxChain {
		return
	}
	a := &aheadWindow{s: s, q: q, epoch: epoch, pre: pre, done: make(chan struct{})}
	ra.entries[k] = append(ra.entries[k], a)
	ra.held++
	a.timer = time.AfterFunc(readAheadTTL, func() { ra.expire(k, a) })
	ra.wg.Add(1)
	ra.read.Add(1)
	ra.reading++
	go ra.run(k, a)
}

// run reads window a, starts the read of the window after it (follow),
// and builds its body.
func (ra *readAhead) run(k aheadKey, a *aheadWindow) {
	defer ra.wg.Done()
	a.win, a.err = a.s.ReadCommitWindow(ra.ctx, k.partition, a.q)
	if a.err == nil && payloadBytes(a.win) > readAheadMaxBytes {
		a.win, a.err = store.CommitWindow{}, errReadAheadTooLarge
	}
	a.doneAt = time.Now() // the rows (and the state after them) were read
	ra.mu.Lock()
	ra.reading--
	a.ended = true
	ra.followLocked(k, a)
	ra.mu.Unlock()
	if a.err == nil && a.pre != nil {
		buf, _ := ra.bufs.Get().(*bytes.Buffer)
		if buf == nil {
			buf = new(bytes.Buffer)
		}
		a.body = a.pre.build(a.win, a.q, buf)
		ra.bufs.Put(buf)
	}
	close(a.done)
}

// followLocked starts reading the window after a when a was read, the
// limit cut it short, and it ends its key's chain: it is the chain's last
// window, or a request took it and the chain is empty (the request waits
// for a; its client will ask for the window after it next). The chain's
// bound (maxChain) holds as for any read.
func (ra *readAhead) followLocked(k aheadKey, a *aheadWindow) {
	if !a.ended || a.err != nil || a.win.Complete || len(a.win.Commits) == 0 || a.dropped {
		return
	}
	chain := ra.entries[k]
	if !(len(chain) == 0 && a.taken) && !(len(chain) > 0 && chain[len(chain)-1] == a) {
		return
	}
	q := a.q
	q.AfterSeq, q.Bulk = a.win.Commits[len(a.win.Commits)-1].Seq, true
	ra.launchLocked(a.s, k, q, a.epoch, a.pre)
}

// expire drops window a, and the windows after it in its chain, when
// it is still held.
func (ra *readAhead) expire(k aheadKey, a *aheadWindow) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	chain := ra.entries[k]
	i := slices.Index(chain, a)
	if i < 0 {
		return
	}
	for _, b := range chain[i:] {
		b.timer.Stop()
		b.dropped = true
	}
	ra.held -= len(chain) - i
	if i == 0 {
		delete(ra.entries, k)
	} else {
		ra.entries[k] = chain[:i]
	}
}

// dropLocked drops the key's chain.
func (ra *readAhead) dropLocked(k aheadKey) {
	chain := ra.entries[k]
	for _, a := range chain {
		a.timer.Stop()
		a.dropped = true
	}
	ra.held -= len(chain)
	delete(ra.entries, k)
}

// take returns the window read ahead for the key when it answers q under
// epoch, waiting for its read if it is still running, and when it ended,
// with its body compressed ahead if it has one (which the request checks
// before it uses it: usable). The window's State is kept only when both
// the read and q asked for it at the same running version. A chain that
// does not begin with q's window is dropped; the windows after it stay.
func (ra *readAhead) take(ctx context.Context, k aheadKey, q store.CommitWindowQuery, epoch string) (store.CommitWindow, *preBody, time.Time, bool) {
	ra.mu.Lock()
	var a *aheadWindow
	if chain := ra.entries[k]; len(chain) > 0 {
		if chain[0].answers(q, epoch) {
			a = chain[0]
			a.timer.Stop()
			a.taken = true
			ra.held--
			if len(chain) == 1 {
				delete(ra.entries, k)
			} else {
				// The window after it may now be followed in turn.
				chain = slices.Delete(chain, 0, 1)
				ra.entries[k] = chain
				ra.followLocked(k, chain[len(chain)-1])
			}
		} else {
			ra.dropLocked(k)
		}
	}
	ra.mu.Unlock()
	if a == nil {
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
	for k := range ra.entries {
		ra.dropLocked(k)
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
