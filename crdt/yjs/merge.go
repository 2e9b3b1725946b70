package yjs

import (
	"bytes"
	"cmp"
	"container/heap"
	"fmt"
	"slices"
)

// Merger merges Yjs updates (update format v1). Its Merge method is the
// server-side merger of the `yjs-doc` crdtType (spec §5.10.2).
//
// The merged update carries every struct of the inputs once: per client,
// the structs are laid out by clock, overlapping ranges are taken once,
// gaps are marked with Skip structs, and the delete sets are united. A
// range that is deleted keeps its position but drops its content (a
// ContentDeleted item), and a range an input garbage-collected stays
// garbage-collected, as a Y.Doc does when it garbage-collects; adjacent
// structs join as a Y.Doc joins them. Applied by Yjs, the result gives the
// same document as applying every input to one Y.Doc.
//
// The result depends only on what the inputs say, not on how they are
// split or in which order they come, so merging is commutative,
// associative and idempotent down to the bytes for updates Yjs produced.
//
// The zero Merger has no size bound.
type Merger struct {
	// MaxBytes bounds each input and the merged update; a larger one is
	// refused with an error wrapping ErrTooLarge. 0 means no bound.
	MaxBytes int
}

// Merge merges the stored value of a crdt column with a pushed one
// (§5.10.2). A nil or empty value is the empty document.
func (m Merger) Merge(stored, incoming []byte) ([]byte, error) {
	return m.MergeUpdates(stored, incoming)
}

// MergeUpdates merges any number of updates into one. Malformed input is
// refused with an error wrapping ErrMalformed.
func (m Merger) MergeUpdates(updates ...[]byte) ([]byte, error) {
	clients := map[uint64]*clientState{}
	total := 0
	for i, u := range updates {
		if len(u) == 0 {
			continue
		}
		total += len(u)
		if m.MaxBytes > 0 && len(u) > m.MaxBytes {
			return nil, fmt.Errorf("%w: an input of %d bytes, the bound is %d", ErrTooLarge, len(u), m.MaxBytes)
		}
		if err := scan(i, u, clients); err != nil {
			return nil, err
		}
	}
	ids := make([]uint64, 0, len(clients))
	withItems := uint64(0)
	for c, cs := range clients {
		ids = append(ids, c)
		cs.gc = normalize(cs.gc)
		cs.deleted = normalize(cs.deleted)
		if cs.items > 0 {
			withItems++ // every client with a struct gets a section
		}
	}
	slices.SortFunc(ids, func(a, b uint64) int { return cmp.Compare(b, a) }) // higher clients first, as Yjs writes
	if m.MaxBytes > 0 {
		total = min(total, m.MaxBytes)
	}
	w := &writer{max: m.MaxBytes, body: appendUvarint(make([]byte, 0, total+16), withItems)}
	for _, c := range ids {
		if err := w.mergeClient(c, clients[c], updates); err != nil {
			return nil, err
		}
	}
	if w.nClients != withItems {
		return nil, fmt.Errorf("yjs: internal error: %d of %d clients with structs written", w.nClients, withItems)
	}
	out := w.body
	nDeleted := uint64(0)
	for _, c := range ids {
		if len(clients[c].deleted) > 0 {
			nDeleted++
		}
	}
	out = appendUvarint(out, nDeleted)
	for _, c := range ids {
		ds := clients[c].deleted
		if len(ds) == 0 {
			continue
		}
		out = appendUvarint(out, c)
		out = appendUvarint(out, uint64(len(ds)))
		for _, d := range ds {
			out = appendUvarint(out, d.start)
			out = appendUvarint(out, d.end-d.start)
		}
		if w.max > 0 && len(out) > w.max {
			return nil, w.tooLarge()
		}
	}
	if w.max > 0 && len(out) > w.max {
		return nil, w.tooLarge()
	}
	return out, nil
}

// Validate reports whether update is a well-formed update (nil if so, an
// error wrapping ErrMalformed if not). An empty update is the empty
// document.
func Validate(update []byte) error {
	if len(update) == 0 {
		return nil
	}
	return scan(0, update, map[uint64]*clientState{})
}

// normalize sorts ranges and joins those that overlap or touch.
func normalize(rs []rng) []rng {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, func(a, b rng) int { return cmp.Compare(a.start, b.start) })
	out := rs[:1]
	for _, x := range rs[1:] {
		last := &out[len(out)-1]
		if x.start <= last.end {
			last.end = max(last.end, x.end)
			continue
		}
		out = append(out, x)
	}
	return out
}

// blockReader reads the structs of one block, Skips left out.
type blockReader struct {
	r     reader
	left  uint64
	clock uint64
	cur   strct
	ok    bool
}

func (br *blockReader) next() error {
	for br.left > 0 {
		br.left--
		s, err := br.r.readStruct(br.clock, false)
		if err != nil {
			return err
		}
		br.clock = s.end()
		if s.kind == kindSkip {
			continue
		}
		br.cur, br.ok = s, true
		return nil
	}
	br.ok = false
	return nil
}

// readerHeap orders the block readers of a client by their current
// struct (before).
type readerHeap []*blockReader

func (h readerHeap) Len() int           { return len(h) }
func (h readerHeap) Less(i, j int) bool { return before(&h[i].cur, &h[j].cur) }
func (h readerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readerHeap) Push(x any)        { *h = append(*h, x.(*blockReader)) }
func (h *readerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// before orders the structs that compete for the next clocks: the lower
// clock first; at the same clock a GC (its clocks stay collected anyway),
// then the longer. Equal ones carry the same content unless Yjs split a
// surrogate pair in one of them (ContentString.splice puts U+FFFD in
// place of each half); the greater bytes, which keep the character
// (its first byte 0xF0-0xF4 against U+FFFD's 0xEF), win, so that the
// choice does not depend on the order of the inputs.
func before(a, b *strct) bool {
	if a.clock != b.clock {
		return a.clock < b.clock
	}
	if (a.kind == kindGC) != (b.kind == kindGC) {
		return a.kind == kindGC
	}
	if a.length != b.length {
		return a.length > b.length
	}
	return bytes.Compare(a.content, b.content) > 0
}

// mergeClient writes the structs of one client: every clock any update
// carries, once, in order.
func (w *writer) mergeClient(client uint64, cs *clientState, updates [][]byte) error {
	if len(cs.blocks) == 0 {
		return nil
	}
	readers := make(readerHeap, 0, len(cs.blocks))
	for _, b := range cs.blocks {
		br := &blockReader{r: reader{b: updates[b.update], pos: b.off}, left: b.n, clock: b.clock}
		if err := br.next(); err != nil {
			return err
		}
		if br.ok {
			readers = append(readers, br)
		}
	}
	heap.Init(&readers)
	w.startClient(client)
	pos, started := uint64(0), false
	gi, di := 0, 0
	for len(readers) > 0 {
		best := readers[0]
		s := &best.cur
		if !started || s.end() > pos {
			start := s.clock
			switch {
			case !started:
				w.firstClock, started = start, true
			case start > pos:
				if err := w.skip(start - pos); err != nil {
					return err
				}
			default:
				start = pos
			}
			if err := w.emit(client, s, start, cs, &gi, &di); err != nil {
				return err
			}
			pos = s.end()
		}
		if err := best.next(); err != nil {
			return err
		}
		if best.ok {
			heap.Fix(&readers, 0)
		} else {
			heap.Pop(&readers)
		}
	}
	return w.endClient()
}

// emit writes clocks [start, s.end()) of s, split where they enter or
// leave a garbage-collected or deleted range.
func (w *writer) emit(client uint64, s *strct, start uint64, cs *clientState, gi, di *int) error {
	gc, del := cs.gc, cs.deleted
	cur := cursor{ref: s.ref, b: s.content}
	if s.kind == kindItem && start > s.clock {
		cur.take(start-s.clock, false)
	}
	for a, e := start, s.end(); a < e; {
		for *gi < len(gc) && gc[*gi].end <= a {
			*gi++
		}
		for *di < len(del) && del[*di].end <= a {
			*di++
		}
		b, collected, deleted := e, false, false
		switch {
		case *gi < len(gc) && gc[*gi].start <= a:
			collected, b = true, min(b, gc[*gi].end)
		default:
			if *gi < len(gc) {
				b = min(b, gc[*gi].start)
			}
			if *di < len(del) && del[*di].start <= a {
				deleted, b = true, min(b, del[*di].end)
			} else if *di < len(del) {
				b = min(b, del[*di].start)
			}
		}
		p := strct{kind: kindItem, clock: a, length: b - a}
		switch {
		case collected || s.kind == kindGC:
			p.kind = kindGC
			if s.kind == kindItem {
				cur.take(b-a, false)
			}
		case a == s.clock:
			p.hasOrigin, p.origin = s.hasOrigin, s.origin
			p.hasRight, p.rightOrigin = s.hasRight, s.rightOrigin
			p.parent, p.parentSub = s.parent, s.parentSub
		default:
			// A slice: its origin is the clock before it.
			p.hasOrigin, p.origin = true, id{client, a - 1}
			p.hasRight, p.rightOrigin = s.hasRight, s.rightOrigin
		}
		if p.kind == kindItem {
			if deleted {
				p.ref = refDeleted
				cur.take(b-a, false)
			} else {
				p.ref = s.ref
				p.content = cur.take(b-a, true)
			}
		}
		if err := w.put(&p); err != nil {
			return err
		}
		a = b
	}
	return nil
}

// cursor walks the content of an item by clock units.
type cursor struct {
	ref byte
	b   []byte
	// half: the string continues with the second half of a character
	// that a split cut in two.
	half bool
}

// replacement is U+FFFD in UTF-8: Yjs replaces each half of a surrogate
// pair that a split cuts apart with it (ContentString.splice), and lib0
// encodes a lone surrogate as it.
var replacement = []byte{0xef, 0xbf, 0xbd}

// take consumes n units of content and, if keep, returns their payload.
func (c *cursor) take(n uint64, keep bool) []byte {
	switch c.ref {
	case refString:
		return c.takeString(n, keep)
	case refJSON, refAny:
		r := reader{b: c.b}
		for ; n > 0; n-- {
			if c.ref == refAny {
				_ = r.skipAny(false, 0)
			} else {
				_, _ = r.varBytes()
			}
		}
		out := c.b[:r.pos]
		c.b = c.b[r.pos:]
		return out
	case refDeleted:
		return nil
	}
	out := c.b // length 1: the whole content
	c.b = nil
	return out
}

func (c *cursor) takeString(n uint64, keep bool) []byte {
	lead := c.half
	if lead {
		c.half = false
		n--
	}
	i, tail := 0, false
	for n > 0 && i < len(c.b) {
		switch ch := c.b[i]; {
		case ch < 0x80:
			i, n = i+1, n-1
		case ch < 0xe0:
			i, n = i+2, n-1
		case ch < 0xf0:
			i, n = i+3, n-1
		case n == 1:
			// The split falls between the halves of a surrogate pair.
			tail, n = true, 0
		default:
			i, n = i+4, n-2
		}
	}
	out := c.b[:i]
	if tail {
		c.b, c.half = c.b[i+4:], true
	} else {
		c.b = c.b[i:]
	}
	if !keep || !lead && !tail {
		return out
	}
	s := make([]byte, 0, len(out)+6)
	if lead {
		s = append(s, replacement...)
	}
	s = append(s, out...)
	if tail {
		s = append(s, replacement...)
	}
	return s
}
