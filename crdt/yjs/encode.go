package yjs

import "fmt"

// writer encodes the merged structs, joining adjacent ones.
type writer struct {
	max      int
	body     []byte // the client sections written
	nClients uint64

	sec        []byte // the structs of the current client
	nStructs   uint64
	client     uint64
	firstClock uint64

	run run
	buf []byte // run content when runs join (reused)

	readers []blockReader // the block readers of the current client (reused)
	heap    readerHeap
	gc      []rng // the current client's garbage-collected ranges (reused)
}

// run is the struct being built: pieces join it while they continue it.
type run struct {
	open    bool
	p       strct
	content []byte
	owned   bool // content is buf
}

func (w *writer) tooLarge() error {
	return fmt.Errorf("%w: the merged update exceeds %d bytes", ErrTooLarge, w.max)
}

func (w *writer) startClient(client uint64) {
	w.client, w.sec, w.nStructs = client, w.sec[:0], 0
}

func (w *writer) endClient() error {
	if err := w.flush(); err != nil {
		return err
	}
	if w.nStructs == 0 {
		return nil
	}
	w.body = appendUvarint(w.body, w.nStructs)
	w.body = appendUvarint(w.body, w.client)
	w.body = appendUvarint(w.body, w.firstClock)
	w.body = append(w.body, w.sec...)
	w.nClients++
	if w.max > 0 && len(w.body) > w.max {
		return w.tooLarge()
	}
	return nil
}

// joins reports whether p continues the open run: Yjs's mergeWith rules
// for GC and Item (same client, adjacent clocks, p's origin is the run's
// last clock, same right origin, content that concatenates).
func (w *writer) joins(p *strct) bool {
	r := &w.run.p
	switch {
	case !w.run.open || r.kind != p.kind || r.end() != p.clock:
		return false
	case p.kind == kindGC:
		return true
	}
	return r.ref == p.ref && mergeable(p.ref) &&
		p.hasOrigin && p.origin == id{w.client, p.clock - 1} &&
		r.hasRight == p.hasRight && (!p.hasRight || r.rightOrigin == p.rightOrigin)
}

// put adds a piece.
func (w *writer) put(p *strct) error {
	if w.joins(p) {
		w.run.p.length += p.length
		if len(p.content) > 0 {
			if !w.run.owned {
				w.buf = append(w.buf[:0], w.run.content...)
				w.run.owned = true
			}
			w.buf = append(w.buf, p.content...)
			w.run.content = w.buf
		}
		return nil
	}
	if err := w.flush(); err != nil {
		return err
	}
	w.run = run{open: true, p: *p, content: p.content}
	return nil
}

// skip writes a Skip over clocks no update carries.
func (w *writer) skip(n uint64) error {
	if err := w.flush(); err != nil {
		return err
	}
	w.sec = append(w.sec, infoSkip)
	w.sec = appendUvarint(w.sec, n)
	w.nStructs++
	return nil
}

// flush writes the open run.
func (w *writer) flush() error {
	if !w.run.open {
		return nil
	}
	p := &w.run.p
	w.run.open = false
	w.nStructs++
	if p.kind == kindGC {
		w.sec = append(w.sec, 0)
		w.sec = appendUvarint(w.sec, p.length)
		return w.check()
	}
	info := p.ref
	if p.hasOrigin {
		info |= infoOrigin
	}
	if p.hasRight {
		info |= infoRightOrigin
	}
	explicit := !p.hasOrigin && !p.hasRight
	if explicit && p.parentSub {
		info |= infoParentSub
	}
	w.sec = append(w.sec, info)
	if p.hasOrigin {
		w.sec = appendUvarint(appendUvarint(w.sec, p.origin.client), p.origin.clock)
	}
	if p.hasRight {
		w.sec = appendUvarint(appendUvarint(w.sec, p.rightOrigin.client), p.rightOrigin.clock)
	}
	if explicit {
		w.sec = append(w.sec, p.parent...)
	}
	switch p.ref {
	case refDeleted:
		w.sec = appendUvarint(w.sec, p.length)
	case refJSON, refAny:
		w.sec = appendUvarint(w.sec, p.length)
		w.sec = append(w.sec, w.run.content...)
	case refString:
		w.sec = appendUvarint(w.sec, uint64(len(w.run.content)))
		w.sec = append(w.sec, w.run.content...)
	default:
		w.sec = append(w.sec, w.run.content...)
	}
	return w.check()
}

func (w *writer) check() error {
	if w.max > 0 && len(w.body)+len(w.sec) > w.max {
		return w.tooLarge()
	}
	return nil
}
