package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"zombiezen.com/go/sqlite"

	"github.com/syncgo/syncgo/store"
)

// writeFunc is one unit of work for the writer: it runs inside a savepoint
// of the current batch transaction.
type writeFunc func(ctx context.Context, c *conn) error

type writeReq struct {
	ctx  context.Context
	fn   writeFunc
	done chan error
	// last ends its batch: no request after it runs in its transaction
	// (doLast).
	last bool
}

// writer owns the write connection and runs the group-commit loop. Only
// the writer goroutine uses the connection; its statements are prepared
// once and cached on it.
type writer struct {
	s     *Store
	c     *conn
	reqs  chan *writeReq
	quit  chan struct{}
	ended chan struct{}
	// ck runs the idle checkpoints (checkpoint.go); nil in tests that
	// build a writer alone.
	ck *checkpointer

	// pending are the commits of the batch in progress, published to
	// s.recent once it commits. dropRecent empties s.recent instead, the
	// batch's commits too (one of its writes changed the log: a prune, a
	// migration); staleRecent empties it before the batch's commits are
	// added (another connection wrote before the batch). dataVersion is
	// the connection's PRAGMA data_version at the last batch's start (0:
	// not read yet).
	pending     []recentCommit
	dropRecent  bool
	staleRecent bool
	dataVersion int64

	// savepointWrites is c.writes right after the request in progress
	// opened its savepoint: while they are equal, the request wrote
	// nothing yet and its first candidate is that savepoint (tx.go).
	savepointWrites int64

	// cache is the batch's commit sequences and serve gates
	// (batchcache.go).
	cache batchCache
}

// requestSavepoint is the savepoint each request of a batch runs in.
const requestSavepoint = "w"

var _ store.LocalWriter = (*Store)(nil)

// LocalWriter marks the store's write boundary as this process's single
// writer (store.LocalWriter).
func (s *Store) LocalWriter() {}

func newWriter(s *Store, c *conn) *writer {
	w := &writer{
		s:     s,
		c:     c,
		reqs:  make(chan *writeReq, 1024),
		quit:  make(chan struct{}),
		ended: make(chan struct{}),
	}
	c.other = w.otherStatement
	return w
}

// otherStatement runs before a statement of the writer's connection that
// is not a push's: the pending sequences are written and forgotten, and
// the gates too, so that it reads and writes the tables as they are and
// what it changes is read again after it.
func (w *writer) otherStatement() error {
	w.cache.forgetGates()
	if len(w.cache.seqs) == 0 {
		return nil
	}
	if err := w.cache.flush(w.c); err != nil {
		return err
	}
	w.cache.forgetSeqs()
	return nil
}

// control runs one of the writer's transaction statements (BEGIN,
// COMMIT, the savepoints): none is a statement otherStatement must run
// before; the caller keeps the cache in step.
func (w *writer) control(query string) error {
	defer w.c.enterHot().exitHot()
	return w.c.exec(query)
}

// do queues fn and waits until its batch has committed (or it failed). A
// read-only store has no writer: ErrReadOnly.
func (w *writer) do(ctx context.Context, fn writeFunc) error {
	return w.submit(ctx, fn, false)
}

// doLast is do for a write that must commit before any later request
// runs: a request after it in its batch could otherwise read, on another
// connection, what the batch has not committed yet.
func (w *writer) doLast(ctx context.Context, fn writeFunc) error {
	return w.submit(ctx, fn, true)
}

func (w *writer) submit(ctx context.Context, fn writeFunc, last bool) error {
	if w == nil {
		return ErrReadOnly
	}
	if w.s.closed.Load() {
		return store.ErrClosed
	}
	if c, ok := ctx.Value(inWriterKey{}).(*conn); ok {
		// Called from inside a writer job (DeleteUnreferencedBlob's del
		// deleting a blob of this store): run in that job.
		return full(fn(ctx, c))
	}
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1), last: last}
	select {
	case w.reqs <- req:
	case <-w.quit:
		return store.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the request always gets an answer: the caller must not
	// walk away from a write that may still commit. A request queued
	// after the writer drained its queue at stop (the closed check above
	// raced Close) is never taken: once the writer has ended, every
	// request it took was answered, so one without an answer never ran.
	select {
	case err := <-req.done:
		return full(err)
	case <-w.ended:
		select {
		case err := <-req.done:
			return full(err)
		default:
			return store.ErrClosed
		}
	}
}

// full marks a write that failed for lack of space (SQLITE_FULL: the disk
// or max_page_count) with store.ErrStorageFull.
func full(err error) error {
	if err != nil && sqlite.ErrCode(err).ToPrimary() == sqlite.ResultFull && !errors.Is(err, store.ErrStorageFull) {
		return fmt.Errorf("%w: %w", store.ErrStorageFull, err)
	}
	return err
}

func (w *writer) stop() {
	close(w.quit)
	<-w.ended
	if w.ck != nil {
		w.ck.stop()
	}
	w.c.close()
}

func (w *writer) run() {
	defer close(w.ended)
	batch := make([]*writeReq, 0, w.s.cfg.MaxBatch)
	committed := false
	for {
		batch = batch[:0]
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		default:
			if committed && w.ck != nil {
				w.ck.idle()
			}
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			case <-w.quit:
				w.drainClosed()
				return
			}
		}
	fill:
		for len(batch) < cap(batch) && !batch[len(batch)-1].last {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		committed = w.runBatch(batch)
	}
}

func (w *writer) drainClosed() {
	for {
		select {
		case r := <-w.reqs:
			r.done <- store.ErrClosed
		default:
			return
		}
	}
}

// runBatch runs the requests in one transaction, each in its own
// savepoint, and commits once; it reports whether it committed writes.
func (w *writer) runBatch(batch []*writeReq) bool {
	results := make([]error, len(batch))
	w.cache.reset()
	defer w.cache.reset()
	if err := w.control("BEGIN IMMEDIATE"); err != nil {
		for _, r := range batch {
			r.done <- fmt.Errorf("begin: %w", err)
		}
		return false
	}
	w.checkDataVersion()
	applied := 0
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		results[i] = w.runOne(r)
		if results[i] == nil {
			applied++
		}
	}
	var commitErr error
	if applied > 0 {
		commitErr = w.flushSeqs()
		if commitErr == nil {
			commitErr = w.control("COMMIT")
		}
	} else {
		commitErr = w.control("ROLLBACK")
	}
	if commitErr != nil {
		_ = w.control("ROLLBACK")
		if applied > 0 {
			commitErr = fmt.Errorf("commit: %w", commitErr)
			for i := range results {
				if results[i] == nil {
					results[i] = commitErr
				}
			}
		}
	}
	if applied > 0 && commitErr == nil {
		w.s.stats.batches.Add(1)
		if w.dropRecent {
			w.s.recent.publish(nil, true)
		} else {
			w.s.recent.publish(w.pending, w.staleRecent)
		}
	} else if w.dropRecent || w.staleRecent {
		w.s.recent.publish(nil, true)
	}
	clear(w.pending)
	w.pending, w.dropRecent, w.staleRecent = w.pending[:0], false, false
	for i, r := range batch {
		if results[i] != nil {
			w.s.stats.writeErrors.Add(1)
		} else {
			w.s.stats.writes.Add(1)
		}
		r.done <- results[i]
	}
	return applied > 0 && commitErr == nil
}

func (w *writer) runOne(r *writeReq) (err error) {
	if err := w.savepoint(requestSavepoint); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	w.savepointWrites = w.c.writes
	mark := len(w.pending)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlitestore: write panicked: %v\n%s", p, debug.Stack())
		}
		if err != nil {
			w.pending = w.pending[:mark]
			w.rollbackTo(requestSavepoint, &err)
		}
		w.release(requestSavepoint, &err)
	}()
	return r.fn(r.ctx, w.c)
}

// flushSeqs writes the batch's pending commit sequences, before COMMIT.
func (w *writer) flushSeqs() error {
	if err := w.cache.flush(w.c); err != nil {
		return fmt.Errorf("commit sequence: %w", err)
	}
	return nil
}

// savepoint opens a savepoint of the batch.
func (w *writer) savepoint(name string) error {
	if err := w.control("SAVEPOINT " + name); err != nil {
		return err
	}
	w.cache.savepoint()
	return nil
}

// rollbackTo rolls the batch back to the named savepoint (which stays
// open), joining a failure to *err.
func (w *writer) rollbackTo(name string, err *error) {
	if rbErr := w.control("ROLLBACK TO " + name); rbErr != nil {
		*err = errors.Join(*err, rbErr)
	}
	w.cache.rollbackTo()
}

// release closes the named savepoint; a failure becomes *err when it is
// nil.
func (w *writer) release(name string, err *error) {
	if relErr := w.control("RELEASE " + name); relErr != nil && *err == nil {
		*err = relErr
	}
	w.cache.release()
}

// checkDataVersion reads the connection's data_version at a batch's start
// (the batch holds the write lock): when another connection committed
// since the last batch, the recent commits may no longer be what the log
// holds, and the batch empties them.
func (w *writer) checkDataVersion() {
	if w.s.recent == nil {
		return
	}
	var v int64
	if err := w.c.queryRow("PRAGMA data_version").Scan(&v); err != nil {
		w.staleRecent, w.dataVersion = true, 0
		return
	}
	if w.dataVersion != 0 && v != w.dataVersion {
		w.staleRecent = true
	}
	w.dataVersion = v
}

// keep records a commit appended in the batch in progress, for s.recent;
// scopes are the scopes JSON the append wrote, one per change.
func (w *writer) keep(partition string, seq int64, nc store.NewCommit, scopes [][]byte) {
	if w.s.recent == nil {
		return
	}
	c, err := keptCommit(partition, seq, nc, scopes)
	if err != nil {
		return // a gap: the windows over it read the log
	}
	w.pending = append(w.pending, c)
}
