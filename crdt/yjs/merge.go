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
	var x index
	total := 0
	for i, u := range updates {
		if len(u) == 0 {
			continue
		}
		if m.MaxBytes > 0 && len(u) > m.MaxBytes {
			return nil, fmt.Errorf("%w: an input of %d bytes, the bound is %d", ErrTooLarge, len(u), m.MaxBytes)
		}
		total += len(u)
		if err := x.scan(i, u); err != nil {
			return nil, err
		}
	}
	// Higher clients first, as Yjs writes them; a client's blocks in input
	// order.
	slices.SortStableFunc(x.blocks, func(a, b block) int { return cmp.Compare(b.client, a.client) })
	if err := x.repeatedClient(); err != nil {
		return nil, err
	}
	slices.SortFunc(x.del, func(a, b crange) int {
		return cmp.Or(cmp.Compare(b.client, a.client), cmp.Compare(a.start, b.start))
	})
	sections := uint64(0)
	for i, b := range x.blocks {
		if i == 0 || b.client != x.blocks[i-1].client {
			sections++
		}
	}
	if m.MaxBytes > 0 {
		total = min(total, m.MaxBytes)
	}
	w := &writer{max: m.MaxBytes, body: appendUvarint(make([]byte, 0, total+16), sections)}
	var ds []byte // the delete set, after its count
	var del []rng
	nDeleted := uint64(0)
	for bs, dels := x.blocks, x.del; len(bs)+len(dels) > 0; {
		c := uint64(0)
		if len(bs) > 0 {
			c = bs[0].client
		}
		if len(dels) > 0 {
			c = max(c, dels[0].client)
		}
		var cb []block
		cb, bs = split(bs, func(b block) bool { return b.client == c })
		del, dels = ranges(del[:0], dels, c)
		if len(cb) > 0 {
			var err error
			if del, err = w.mergeClient(c, cb, del, updates); err != nil {
				return nil, err
			}
		} else {
			del = normalize(del)
		}
		if len(del) > 0 {
			nDeleted++
			ds = appendUvarint(ds, c)
			ds = appendUvarint(ds, uint64(len(del)))
			for _, d := range del {
				ds = appendUvarint(appendUvarint(ds, d.start), d.end-d.start)
			}
			if w.max > 0 && len(w.body)+len(ds) > w.max {
				return nil, w.tooLarge()
			}
		}
	}
	if w.nClients != sections {
		return nil, fmt.Errorf("yjs: internal error: %d of %d client sections written", w.nClients, sections)
	}
	out := appendUvarint(w.body, nDeleted)
	out = append(out, ds...)
	if w.max > 0 && len(out) > w.max {
		return nil, w.tooLarge()
	}
	return out, nil
}

// split cuts the leading elements that match off s.
func split[T any](s []T, match func(T) bool) (head, rest []T) {
	i := 0
	for i < len(s) && match(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// ranges appends the leading ranges of client c in rs to dst, and
// returns the rest of rs.
func ranges(dst []rng, rs []crange, c uint64) ([]rng, []crange) {
	head, rest := split(rs, func(r crange) bool { return r.client == c })
	for _, r := range head {
		dst = append(dst, r.rng)
	}
	return dst, rest
}

// Validate reports whether update is a well-formed update (nil if so, an
// error wrapping ErrMalformed if not). An empty update is the empty
// document.
func Validate(update []byte) error {
	if len(update) == 0 {
		return nil
	}
	var x index
	if err := x.scan(0, update); err != nil {
		return err
	}
	slices.SortStableFunc(x.blocks, func(a, b block) int { return cmp.Compare(b.client, a.client) })
	return x.repeatedClient()
}

// repeatedClient refuses an update that carries a client twice (blocks
// sorted by client). Yjs never writes one, and Y.applyUpdate would keep
// only the client's last block; refusing it also keeps the merge of a
// client to one block reader per input.
func (x *index) repeatedClient() error {
	for i := 1; i < len(x.blocks); i++ {
		if b, a := x.blocks[i], x.blocks[i-1]; b.client == a.client && b.update == a.update {
			return &malformedError{off: b.off, reason: fmt.Sprintf("client %d appears twice in an update", b.client)}
		}
	}
	return nil
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
// carries, once, in order. del holds the client's ranges of the delete
// sets; it returns them joined with the client's garbage-collected and
// ContentDeleted ranges: the client's part of the merged delete set.
func (w *writer) mergeClient(client uint64, blocks []block, del []rng, updates [][]byte) ([]rng, error) {
	w.readers = slices.Grow(w.readers[:0], len(blocks))
	for _, b := range blocks {
		w.readers = append(w.readers, blockReader{r: reader{b: updates[b.update], pos: b.off}, left: uint64(b.n), clock: b.clock})
	}
	// The ranges the structs themselves say are collected or deleted.
	gc := w.gc[:0]
	for _, br := range w.readers {
		for br.left > 0 {
			if err := br.next(); err != nil {
				return nil, err
			}
			switch s := &br.cur; {
			case !br.ok:
			case s.kind == kindGC:
				gc = append(gc, rng{s.clock, s.end()})
				del = append(del, rng{s.clock, s.end()})
			case s.ref == refDeleted:
				del = append(del, rng{s.clock, s.end()})
			}
		}
	}
	gc, del = normalize(gc), normalize(del)
	w.gc = gc
	h := &w.heap
	*h = slices.Grow((*h)[:0], len(blocks))
	for i := range w.readers {
		br := &w.readers[i]
		if err := br.next(); err != nil {
			return nil, err
		}
		if br.ok {
			*h = append(*h, br)
		}
	}
	heap.Init(h)
	w.startClient(client)
	pos, started := uint64(0), false
	gi, di := 0, 0
	for h.Len() > 0 {
		best := (*h)[0]
		s := &best.cur
		if !started || s.end() > pos {
			start := s.clock
			switch {
			case !started:
				w.firstClock, started = start, true
			case start > pos:
				if err := w.skip(start - pos); err != nil {
					return nil, err
				}
			default:
				start = pos
			}
			if err := w.emit(client, s, start, gc, del, &gi, &di); err != nil {
				return nil, err
			}
			pos = s.end()
		}
		if err := best.next(); err != nil {
			return nil, err
		}
		if best.ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return del, w.endClient()
}

// emit writes clocks [start, s.end()) of s, split where they enter or
// leave a garbage-collected or deleted range.
func (w *writer) emit(client uint64, s *strct, start uint64, gc, del []rng, gi, di *int) error {
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
