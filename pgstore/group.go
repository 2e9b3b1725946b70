package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncgo/syncgo/store"
)

// Group commit (see the package documentation, "Writes"): the Write calls
// of one partition queue in its group; a leader goroutine, started by the
// first call that finds no leader, takes up to Config.MaxBatch of them at a
// time and runs their functions one after another in one database
// transaction (a batch), each in a savepoint of its own, then commits once.
// The leader exits when the queue is empty, so an idle partition costs
// nothing. Groups of different partitions run on different connections at
// the same time.

// writeReq is one queued Write.
type writeReq struct {
	ctx   context.Context
	reads *store.WriteReads // what fn reads first (WriteReadAhead), or nil
	fn    func(ctx context.Context, tx store.WriteTx) error
	done  chan error
}

// groups are the write queues of the partitions that have a leader.
type groups struct {
	mu sync.Mutex
	m  map[string]*group
}

// group is the write queue of one partition; it exists while its leader
// runs.
type group struct {
	queue []*writeReq
}

// Write runs fn under the partition's write boundary, in a transaction it
// may share with concurrent Write calls of the same partition (group
// commit). It returns once the transaction committed (nil) or fn's writes
// were undone (fn's error, or the error that ended the transaction). Once
// queued, a call always waits for its answer: a function that may still
// commit is never walked away from.
func (s *Store) Write(ctx context.Context, partition string, fn func(ctx context.Context, tx store.WriteTx) error) error {
	return s.write(ctx, partition, nil, fn)
}

// write is Write, with what fn reads first when known.
func (s *Store) write(ctx context.Context, partition string, reads *store.WriteReads, fn func(ctx context.Context, tx store.WriteTx) error) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, reads: reads, fn: fn, done: make(chan error, 1)}
	s.groups.mu.Lock()
	g := s.groups.m[partition]
	lead := g == nil
	if lead {
		g = &group{}
		s.groups.m[partition] = g
	}
	g.queue = append(g.queue, req)
	s.groups.mu.Unlock()
	if lead {
		go s.lead(partition, g)
	}
	err := <-req.done
	if err != nil {
		s.writeErrors.Add(1)
		return storageFull(err)
	}
	s.writes.Add(1)
	return nil
}

// lead runs the batches of a group until its queue is empty.
func (s *Store) lead(partition string, g *group) {
	for {
		if s.cfg.BatchWait > 0 {
			s.groups.mu.Lock()
			short := len(g.queue) < s.cfg.MaxBatch
			s.groups.mu.Unlock()
			if short {
				time.Sleep(s.cfg.BatchWait)
			}
		}
		s.groups.mu.Lock()
		n := min(len(g.queue), s.cfg.MaxBatch)
		if n == 0 {
			delete(s.groups.m, partition)
			s.groups.mu.Unlock()
			return
		}
		reqs := make([]*writeReq, n)
		copy(reqs, g.queue)
		rest := copy(g.queue, g.queue[n:])
		clear(g.queue[rest:])
		g.queue = g.queue[:rest]
		s.groups.mu.Unlock()
		s.runBatch(partition, reqs)
	}
}

// runBatch runs the requests in one transaction and answers each.
func (s *Store) runBatch(partition string, reqs []*writeReq) {
	results := make([]error, len(reqs))
	var live []int
	for i, r := range reqs {
		if results[i] = r.ctx.Err(); results[i] == nil {
			live = append(live, i)
		}
	}
	if len(live) > 0 {
		s.runLive(partition, reqs, live, results)
	}
	for i, r := range reqs {
		r.done <- results[i]
	}
}

// runLive runs the requests reqs[live] and sets their results. A batch
// that ended on a lost connection runs again from the start, on another
// connection (see "Lost connections", retry.go), when that is safe:
//
//   - The connection was lost before the COMMIT was sent, or the server's
//     own answer to a statement before it was that it ended the session
//     (statements of a connection run in order: the COMMIT after it never
//     ran). Then nothing of the batch was written: its functions run
//     again, and their sequences, journal records and rows are read and
//     written anew.
//   - The COMMIT was sent and its outcome is unknown (the connection failed
//     while the COMMIT's answer was awaited, or before the answer to an
//     earlier statement came back): the batch may have committed. It runs
//     again only when every request of it is a commit (a push, a remote
//     command) with its key in the push-result journal (WriteReads.ClientCommitID, which the
//     engine's function re-checks in the transaction before it applies
//     anything). If the first run committed, the journal records it wrote
//     are there: the run again finds each commit's record and answers it
//     as a replay (cached), appending nothing; if it did not, the run
//     again is the only one that applies them. The partition lock orders
//     the run again after any other transaction of the partition, so a
//     commit is applied at most once whichever way it went, and a commit
//     answered as applied is one whose record the run that answers it
//     wrote. A remote command's Write is keyed the same way (its journal
//     key in the server-command namespace). Other Writes (a backfill's,
//     or any Write without its journal key) fail with the lost
//     connection, and so does the batch that holds one: their callers
//     retry with their own idempotency (a checkpoint's watermark).
func (s *Store) runLive(partition string, reqs []*writeReq, live []int, results []error) {
	for attempt := 0; ; attempt++ {
		lost, unknown := s.runAttempt(partition, reqs, live, results)
		if lost == nil {
			return
		}
		s.noteLost()
		if attempt == maxConnRetries || (unknown && !journaled(reqs, live)) {
			return
		}
		var again []int
		for _, i := range live {
			if results[i] = reqs[i].ctx.Err(); results[i] == nil {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return
		}
		live = again
		s.retried(reqs[live[0]].ctx, "write", attempt, lost)
	}
}

// journaled reports whether every request of reqs[live] is a commit (a
// push or a remote command) keyed in the push-result journal.
func journaled(reqs []*writeReq, live []int) bool {
	for _, i := range live {
		if r := reqs[i].reads; r == nil || r.ClientCommitID == "" {
			return false
		}
	}
	return true
}

// runAttempt runs the requests reqs[live] once, in one batch, and sets
// their results. lost is the error of a batch that ended on a lost
// connection (nil otherwise); unknown reports that its COMMIT was sent and
// may have been carried out.
func (s *Store) runAttempt(partition string, reqs []*writeReq, live []int, results []error) (lost error, unknown bool) {
	// The batch's statements run with a context of its own, cancelled only
	// when every request of the batch gave up: a caller that goes away
	// must not interrupt a statement of the shared connection. Each call
	// of a request checks the request's own context first instead.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(live)))
	for _, i := range live {
		stop := context.AfterFunc(reqs[i].ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		for _, i := range live {
			results[i] = fmt.Errorf("write: acquire connection: %w", err)
		}
		if connLost(err) && ctx.Err() == nil {
			return err, false
		}
		return nil, false
	}
	defer conn.Release()
	b := newBatch(s, conn, ctx, partition, len(live) > 1)
	b.lockPartition()
	liveReqs := make([]*writeReq, len(live))
	for j, i := range live {
		liveReqs[j] = reqs[i]
	}
	b.readAhead(liveReqs)
	defer b.rollback() // no-op after a commit
	defer func() {
		// The batch ended on a lost connection: an error that says so, or
		// a connection closed under it while its context was live (a
		// function may have returned the driver's error translated).
		if b.committed || (b.broken == nil && lost == nil) {
			return
		}
		end := lost
		if end == nil {
			end = b.broken
		}
		if connLost(end) || (conn.Conn().IsClosed() && ctx.Err() == nil) {
			lost, unknown = end, b.commitSent && !b.commitNotRun
			return
		}
		lost = nil
	}()
	txs := make([]*writeTx, len(reqs))
	var applied []int
	for _, i := range live {
		r := reqs[i]
		if results[i] = b.broken; results[i] != nil {
			continue
		}
		if results[i] = r.ctx.Err(); results[i] != nil {
			continue
		}
		tx, err := b.run(r)
		if results[i] = err; err == nil {
			txs[i] = tx
			applied = append(applied, i)
		}
	}
	if len(applied) == 0 {
		return nil, false
	}
	err = b.broken
	if err == nil {
		if err = b.commit(); err != nil {
			err = fmt.Errorf("write: commit: %w", err)
			lost = err
		}
	}
	if err != nil {
		for _, i := range applied {
			results[i] = err
		}
		return lost, false
	}
	if b.committed {
		s.batches.Add(1)
	}
	for _, i := range applied {
		// A commit whose deferred write failed after its function
		// returned was undone (batch.send).
		if results[i] = txs[i].late; results[i] == nil {
			s.commits.Add(txs[i].appended)
		}
	}
	return nil, false
}

// run runs one request's function, in the savepoint syncgo_commit when the
// batch carries several, and returns its commit's view. On an error the
// function's writes are undone and the batch goes on, unless it broke: a
// batch of one rolls back as a whole, and one that cannot roll back to the
// savepoint (a lost connection) fails every commit it carries.
func (b *batch) run(r *writeReq) (*writeTx, error) {
	tx := &writeTx{b: b, partition: b.partition, st: b.s.schema.Load(), outer: b.multi, index: len(b.commits)}
	b.commits = append(b.commits, tx)
	mark, sends := len(b.pending), b.sends
	if b.multi {
		b.pending = append(b.pending, deferred{what: "savepoint", sql: sqlSavepointCommit, ctl: true, owner: tx})
	}
	err := callWrite(r.ctx, tx, r.fn)
	tx.done = true
	if tx.dead {
		// A commit before it failed late, and took it along before any of
		// its statements ran (batch.lateFailure).
		kept := b.pending[:0]
		for _, d := range b.pending {
			if d.owner != tx {
				kept = append(kept, d)
			}
		}
		b.pending = kept
		return tx, tx.late
	}
	switch {
	case b.broken != nil:
		return tx, errors.Join(err, b.broken)
	case err == nil && b.aborted():
		// fn swallowed the error of a failed statement.
		err = errors.New("the transaction failed earlier")
	case err == nil && b.multi:
		err = b.endCommit(tx)
	}
	if err == nil {
		return tx, nil
	}
	if !b.multi || b.conn.Conn().IsClosed() {
		if b.broken == nil {
			b.broken = err
		}
		return tx, err
	}
	b.seq -= tx.appended
	tx.appended = 0
	if b.sends == sends {
		// Nothing of it reached the database.
		b.pending = b.pending[:mark]
		return tx, err
	}
	if rerr := b.rollbackTo(sqlSavepointCommitName, true); rerr != nil {
		return tx, errors.Join(err, rerr)
	}
	return tx, err
}

// callWrite calls fn, turning a panic into an error.
func callWrite(ctx context.Context, tx *writeTx, fn func(ctx context.Context, tx store.WriteTx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgstore: write function panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, tx)
}
