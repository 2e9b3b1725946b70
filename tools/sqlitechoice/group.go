package sqlitechoice

import (
	"errors"
	"fmt"
	"sync"
)

// GroupWriter is the batched ("group commit") writer: one goroutine owns the
// connection, takes up to MaxBatch pending commits from a channel, applies
// each inside its own SAVEPOINT within one BEGIN IMMEDIATE ... COMMIT
// transaction, and acknowledges all of them after the single COMMIT (one
// fsync) returns. A commit that fails is rolled back to its savepoint and
// only that commit gets the error.
//
// No timer is used to gather a batch: while one COMMIT is syncing, new
// requests queue up in the channel and form the next batch.
type GroupWriter struct {
	a        *Appender
	reqs     chan *request
	maxBatch int
	wg       sync.WaitGroup

	// Stats, owned by the writer goroutine; read them after Close.
	Batches, Commits int64
}

type request struct {
	c    *Commit
	seq  int64
	err  error
	done chan struct{}
}

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("group writer closed")

// NewGroupWriter starts the writer goroutine on a.
func NewGroupWriter(a *Appender, maxBatch int) *GroupWriter {
	g := &GroupWriter{a: a, reqs: make(chan *request, 4*maxBatch), maxBatch: maxBatch}
	g.wg.Add(1)
	go g.run()
	return g
}

// Submit queues c and waits until it is durable (or failed).
func (g *GroupWriter) Submit(c *Commit) (int64, error) {
	r := &request{c: c, done: make(chan struct{})}
	g.reqs <- r
	<-r.done
	return r.seq, r.err
}

// Close stops the writer after the queued commits are written. No Submit may
// be running or follow.
func (g *GroupWriter) Close() {
	close(g.reqs)
	g.wg.Wait()
}

func (g *GroupWriter) run() {
	defer g.wg.Done()
	batch := make([]*request, 0, g.maxBatch)
	for r := range g.reqs {
		batch = append(batch[:0], r)
	gather:
		for len(batch) < g.maxBatch {
			select {
			case r, ok := <-g.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		g.flush(batch)
		for _, r := range batch {
			close(r.done)
		}
	}
}

// flush writes one batch in one transaction and sets each request's result.
func (g *GroupWriter) flush(batch []*request) {
	g.Batches++
	a := g.a
	fail := func(err error) {
		for _, r := range batch {
			r.seq, r.err = 0, err
		}
	}
	if err := a.begin.Exec(); err != nil {
		fail(fmt.Errorf("begin: %w", err))
		return
	}
	for _, r := range batch {
		if err := a.savepoint.Exec(); err != nil {
			a.rollback.Exec()
			fail(fmt.Errorf("savepoint: %w", err))
			return
		}
		r.seq, r.err = a.Apply(r.c)
		if r.err != nil {
			// Undo only this commit; ROLLBACK TO keeps the savepoint open,
			// RELEASE then removes it.
			if err := a.rollbackTo.Exec(); err != nil {
				a.rollback.Exec()
				fail(fmt.Errorf("rollback to savepoint: %w", err))
				return
			}
		}
		if err := a.release.Exec(); err != nil {
			a.rollback.Exec()
			fail(fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	if err := a.commit.Exec(); err != nil {
		a.rollback.Exec()
		fail(fmt.Errorf("commit: %w", err))
		return
	}
	for _, r := range batch {
		if r.err == nil {
			g.Commits++
		}
	}
}
