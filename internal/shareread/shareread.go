// Package shareread shares reads among the requests that ask for them at
// about the same time: the reads of one key that arrive while a read of
// that key is in flight queue; when it ends, the next read answers every
// queued one. The first asker that finds no queue reads alone, on its own
// goroutine; if asks queued meanwhile, a reader goroutine takes over, as
// a group commit's leader: it takes the whole queue each time, so every
// read it sends was sent after each ask it answers was queued, and it
// exits when the queue is empty.
//
// The stores use it for the short commit windows of push+pull rounds
// (many clients' pulls right after their pushes commit in one batch) and,
// on Postgres, for the request state read at a request's entry.
package shareread

import (
	"context"
	"sync"
	"sync/atomic"
)

// Reads are the queues of one kind of shared read, by key: Q is what one
// asker asks, R its answer. The zero value is ready.
type Reads[Q, R any] struct {
	mu sync.Mutex
	m  map[string]*queue[Q, R]
}

// queue is the queue of one key; it exists while its reader runs.
type queue[Q, R any] struct {
	asks []*ask[Q, R]
}

// ask is one queued read.
type ask[Q, R any] struct {
	q    Q
	done chan reply[R] // buffered: the reader never blocks
}

type reply[R any] struct {
	r   R
	err error
}

// Answerer answers the asks qs of one key: reply(i, ...) for each, once.
type Answerer[Q, R any] func(ctx context.Context, qs []Q, reply func(i int, r R, err error))

// Ask queues q under key and waits for its answer. An ask that finds no
// queue for its key reads alone, on its own goroutine and context (no
// read is in flight that it could wait for); the asks that queue
// meanwhile are answered by the key's reader, started when that read
// ends, on the context readCtx derives from the asker's (the read answers
// others too, so it must not end with this asker's), for the asks taken
// together.
func (sr *Reads[Q, R]) Ask(ctx context.Context, readCtx func(context.Context) (context.Context, context.CancelFunc), key string, q Q, answer Answerer[Q, R]) (R, error) {
	sr.mu.Lock()
	if sr.m == nil {
		sr.m = map[string]*queue[Q, R]{}
	}
	sh := sr.m[key]
	if sh == nil {
		sh = &queue[Q, R]{}
		sr.m[key] = sh
		sr.mu.Unlock()
		return sr.alone(ctx, readCtx, key, sh, q, answer)
	}
	a := &ask[Q, R]{q: q, done: make(chan reply[R], 1)}
	sh.asks = append(sh.asks, a)
	sr.mu.Unlock()
	select {
	case ans := <-a.done:
		return ans.r, ans.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// alone answers q, the ask that made the queue sh of key, with a read of
// its own, then hands the asks queued meanwhile to a reader, or removes
// the queue when there are none (also when answer panics: no later ask
// of the key waits on a queue nobody reads).
func (sr *Reads[Q, R]) alone(ctx context.Context, readCtx func(context.Context) (context.Context, context.CancelFunc), key string, sh *queue[Q, R], q Q, answer Answerer[Q, R]) (r R, err error) {
	defer func() {
		sr.mu.Lock()
		if len(sh.asks) == 0 {
			delete(sr.m, key)
			sr.mu.Unlock()
			return
		}
		sr.mu.Unlock()
		rctx, cancel := readCtx(ctx)
		go sr.read(rctx, cancel, key, sh, answer)
	}()
	answer(ctx, []Q{q}, func(_ int, ar R, aerr error) { r, err = ar, aerr })
	return r, err
}

// read answers the queue of a key until it is empty, then removes it.
func (sr *Reads[Q, R]) read(ctx context.Context, cancel context.CancelFunc, key string, sh *queue[Q, R], answer Answerer[Q, R]) {
	defer cancel()
	for {
		sr.mu.Lock()
		asks := sh.asks
		sh.asks = nil
		if len(asks) == 0 {
			delete(sr.m, key)
			sr.mu.Unlock()
			return
		}
		sr.mu.Unlock()
		qs := make([]Q, len(asks))
		for i, a := range asks {
			qs[i] = a.q
		}
		answer(ctx, qs, func(i int, r R, err error) { asks[i].done <- reply[R]{r, err} })
	}
}

// Pending reports how many keys have a queue.
func (sr *Reads[Q, R]) Pending() int {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return len(sr.m)
}

// DetachedContext is the context of a shared read started by the asker
// with context ctx: its values without its cancellation, ended when done
// is closed (a store's close).
func DetachedContext(ctx context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// AskBatched is Ask for reads that cost less together than one by one:
// the asks taken together are answered by alone when there is one, else
// by all (Batched); shared, when set, counts the asks a batched read
// answered.
func (sr *Reads[Q, R]) AskBatched(ctx context.Context, readCtx func(context.Context) (context.Context, context.CancelFunc), key string, q Q,
	alone func(context.Context, Q) (R, error), all func(context.Context, []Q) ([]R, error), shared *atomic.Int64) (R, error) {
	return sr.Ask(ctx, readCtx, key, q, func(ctx context.Context, qs []Q, reply func(int, R, error)) {
		n := Batched(qs, reply, func(q Q) (R, error) { return alone(ctx, q) }, func(qs []Q) ([]R, error) { return all(ctx, qs) })
		if shared != nil {
			shared.Add(int64(n))
		}
	})
}

// Batched answers qs with one read of all of them (all, whose answers
// are in the order of qs) or, when there is one, with alone: what a
// store's Answerer does when reading many at once costs more than one
// read alone. It returns how many asks the batched read answered.
func Batched[Q, R any](qs []Q, reply func(int, R, error), alone func(Q) (R, error), all func([]Q) ([]R, error)) int {
	if len(qs) == 1 {
		r, err := alone(qs[0])
		reply(0, r, err)
		return 0
	}
	rs, err := all(qs)
	for i := range qs {
		if err != nil {
			var zero R
			reply(i, zero, err)
			continue
		}
		reply(i, rs[i], nil)
	}
	return len(qs)
}
