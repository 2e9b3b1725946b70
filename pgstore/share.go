package pgstore

import (
	"context"
	"sync"
)

// Shared reads (entry_share.go, window_share.go): the reads of one key
// that arrive while a read of that key is in flight queue; when it ends,
// the next read answers every queued one. The reader is a goroutine per
// key, as the group commit's leader (group.go): started by the first
// asker that finds no queue, it takes the whole queue each time, so every
// read it sends was sent after each ask it answers was queued, and it
// exits when the queue is empty.

// sharedReads are the queues of one kind of shared read, by key: Q is
// what one asker asks, R its answer.
type sharedReads[Q, R any] struct {
	mu sync.Mutex
	m  map[string]*shareQueue[Q, R]
}

// shareQueue is the queue of one key; it exists while its reader runs.
type shareQueue[Q, R any] struct {
	asks []*shareAsk[Q, R]
}

// shareAsk is one queued read.
type shareAsk[Q, R any] struct {
	q    Q
	done chan shareAnswer[R] // buffered: the reader never blocks
}

type shareAnswer[R any] struct {
	r   R
	err error
}

// answerer answers the asks qs of one key: reply(i, ...) for each, once.
type answerer[Q, R any] func(ctx context.Context, qs []Q, reply func(i int, r R, err error))

// ask queues q under key and waits for its answer; answer runs on the
// key's reader (started here when the key has none), on the store's
// shared read context (sharedReadContext), for the asks taken together.
func (sr *sharedReads[Q, R]) ask(ctx context.Context, s *Store, key string, q Q, answer answerer[Q, R]) (R, error) {
	a := &shareAsk[Q, R]{q: q, done: make(chan shareAnswer[R], 1)}
	sr.mu.Lock()
	if sr.m == nil {
		sr.m = map[string]*shareQueue[Q, R]{}
	}
	sh := sr.m[key]
	lead := sh == nil
	if lead {
		sh = &shareQueue[Q, R]{}
		sr.m[key] = sh
	}
	sh.asks = append(sh.asks, a)
	sr.mu.Unlock()
	if lead {
		rctx, cancel := s.sharedReadContext(ctx)
		go sr.read(rctx, cancel, key, sh, answer)
	}
	select {
	case ans := <-a.done:
		return ans.r, ans.err
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}

// read answers the queue of a key until it is empty, then removes it.
func (sr *sharedReads[Q, R]) read(ctx context.Context, cancel context.CancelFunc, key string, sh *shareQueue[Q, R], answer answerer[Q, R]) {
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
		answer(ctx, qs, func(i int, r R, err error) { asks[i].done <- shareAnswer[R]{r, err} })
	}
}

// pending reports how many keys have a queue (tests).
func (sr *sharedReads[Q, R]) pending() int {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return len(sr.m)
}

// sharedReadContext is the context of a shared read: the first asker's
// values without its cancellation (the read answers others too), ended
// when the store closes.
func (s *Store) sharedReadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
