package yjs

import (
	"encoding/json"
	"fmt"
	"slices"
)

// id names one unit of a client's clock space.
type id struct{ client, clock uint64 }

// Struct kinds. A Skip marks clocks an update does not carry; a GC, clocks
// whose content was garbage-collected; an Item, clocks with content.
const (
	kindGC = iota
	kindSkip
	kindItem
)

// Item info bits (Item.write): the low five bits are the content ref.
const (
	infoOrigin      = 0x80
	infoRightOrigin = 0x40
	infoParentSub   = 0x20
	infoRefMask     = 0x1f
	infoSkip        = 10
)

// Content refs (the readers of Item content, in the order of Yjs's
// contentRefs table).
const (
	refDeleted = 1
	refJSON    = 2
	refBinary  = 3
	refString  = 4
	refEmbed   = 5
	refFormat  = 6
	refType    = 7
	refAny     = 8
	refDoc     = 9
)

// Type refs of ContentType (YArray, YMap, YText, YXmlElement,
// YXmlFragment, YXmlHook, YXmlText).
const (
	typeXMLElement = 3
	typeXMLHook    = 5
	typeMax        = 6
)

// mergeable reports whether adjacent items of this content ref may join
// into one (their content concatenates: ContentDeleted, ContentJSON,
// ContentString and ContentAny).
func mergeable(ref byte) bool {
	return ref == refDeleted || ref == refJSON || ref == refString || ref == refAny
}

// strct is one decoded struct. Its byte fields are sub-slices of the
// update: parent is the encoded parent info and parentSub of an item that
// has neither origin, and content is the content payload:
//
//   - ContentDeleted: nil (the length is the content);
//   - ContentJSON and ContentAny: the encoded elements, without their count
//     (the count is the length);
//   - ContentString: the UTF-8 bytes, without their length;
//   - the others (length 1, never split): the content as encoded.
type strct struct {
	kind        int
	clock       uint64
	length      uint64
	ref         byte
	parentSub   bool // the item names a parentSub (with parent info)
	hasOrigin   bool
	hasRight    bool
	origin      id
	rightOrigin id
	parent      []byte
	// parentItem is the parent type's item when parent names one (not a
	// root type by name).
	hasParentItem bool
	parentItem    id
	content       []byte
}

// refersAhead reports whether an item of client names a struct of the
// same client at its own clock or later (origin, right origin or parent
// item). Yjs never writes one: a client's structs are integrated in clock
// order, so Y.applyUpdate looks such a struct up without waiting for it
// and throws.
func (s *strct) refersAhead(client uint64) bool {
	ahead := func(has bool, x id) bool { return has && x.client == client && x.clock >= s.clock }
	return s.kind == kindItem &&
		(ahead(s.hasOrigin, s.origin) || ahead(s.hasRight, s.rightOrigin) || ahead(s.hasParentItem, s.parentItem))
}

func (s *strct) end() uint64 { return s.clock + s.length }

// readID reads an ID (client, clock).
func (r *reader) readID() (id, error) {
	c, err := r.uvarint()
	if err != nil {
		return id{}, err
	}
	k, err := r.uvarint()
	return id{c, k}, err
}

// readStruct reads the struct at clock. With validate, strings, JSON and
// values are checked as the JavaScript reader checks them (a second pass
// over bytes already checked skips that).
func (r *reader) readStruct(clock uint64, validate bool) (strct, error) {
	s := strct{clock: clock}
	info, err := r.byte1()
	if err != nil {
		return s, err
	}
	switch info & infoRefMask {
	case 0: // GC
		s.kind = kindGC
		s.length, err = r.uvarint()
	case infoSkip:
		s.kind = kindSkip
		s.length, err = r.uvarint()
	default:
		s.kind = kindItem
		err = r.readItem(&s, info, validate)
	}
	if err != nil {
		return s, err
	}
	if s.length == 0 {
		return s, r.fail("a struct of length 0")
	}
	if s.length > maxSafe-clock {
		return s, r.fail("a clock beyond 2^53-1")
	}
	return s, nil
}

func (r *reader) readItem(s *strct, info byte, validate bool) error {
	var err error
	s.ref = info & infoRefMask
	if s.ref > refDoc {
		return r.fail(fmt.Sprintf("unknown content ref %d", s.ref))
	}
	if info&infoOrigin != 0 {
		s.hasOrigin = true
		if s.origin, err = r.readID(); err != nil {
			return err
		}
	}
	if info&infoRightOrigin != 0 {
		s.hasRight = true
		if s.rightOrigin, err = r.readID(); err != nil {
			return err
		}
	}
	if !s.hasOrigin && !s.hasRight {
		start := r.pos
		key, err := r.uvarint()
		if err != nil {
			return err
		}
		if key == 1 {
			_, _, err = r.varString(validate) // the name of a root type
		} else {
			s.hasParentItem = true
			s.parentItem, err = r.readID() // the id of the parent type's item
		}
		if err != nil {
			return err
		}
		if info&infoParentSub != 0 {
			s.parentSub = true
			if _, _, err = r.varString(validate); err != nil {
				return err
			}
		}
		s.parent = r.b[start:r.pos]
	}
	return r.readContent(s, validate)
}

func (r *reader) readContent(s *strct, validate bool) error {
	var err error
	start := r.pos
	switch s.ref {
	case refDeleted:
		s.length, err = r.uvarint()
		return err
	case refJSON, refAny:
		if s.length, err = r.uvarint(); err != nil {
			return err
		}
		start = r.pos
		for n := s.length; n > 0 && err == nil; n-- {
			if s.ref == refAny {
				err = r.skipAny(validate, 0)
				continue
			}
			// An element is JSON text, or "undefined" for undefined.
			at := r.pos
			var v []byte
			if v, _, err = r.varString(validate); err == nil && validate && string(v) != "undefined" && !json.Valid(v) {
				r.pos = at
				err = r.fail("a JSON element does not parse")
			}
		}
	case refString:
		s.content, s.length, err = r.varString(validate)
		return err
	case refBinary:
		s.length = 1
		_, err = r.varBytes()
	case refEmbed:
		s.length = 1
		err = r.jsonString(validate)
	case refFormat:
		s.length = 1
		if _, _, err = r.varString(validate); err == nil {
			err = r.jsonString(validate)
		}
	case refType:
		s.length = 1
		var t uint64
		if t, err = r.uvarint(); err != nil {
			return err
		}
		switch {
		case t > typeMax:
			return r.fail(fmt.Sprintf("unknown type ref %d", t))
		case t == typeXMLElement || t == typeXMLHook:
			_, _, err = r.varString(validate) // the node or hook name
		}
	case refDoc:
		s.length = 1
		if _, _, err = r.varString(validate); err != nil { // guid
			return err
		}
		if validate && r.pos < len(r.b) && (r.b[r.pos] == anyNull || r.b[r.pos] == anyUndefined) {
			// The reader spreads the options and reads their fields.
			return r.fail("subdocument options are null")
		}
		err = r.skipAny(validate, 0)
	}
	if err != nil {
		return err
	}
	s.content = r.b[start:r.pos]
	return nil
}

// block is a run of one client's structs in one update.
type block struct {
	client uint64
	clock  uint64 // clock of the first struct
	off    int    // offset of the first struct
	n      uint32 // number of structs
	update uint32 // index of the update
}

// rng is a range of clocks [start, end).
type rng struct{ start, end uint64 }

// crange is a range of clocks of a client.
type crange struct {
	client uint64
	rng
}

// index is what the first pass learns of the updates: the blocks that
// carry structs other than Skips, and the ranges of the delete sets. It is
// flat (no state per client) and sized by the counts the updates declare
// (never beyond what their bytes can hold), so that it stays a small
// multiple of the input. What a client's structs say about deletion (GC
// and ContentDeleted) is read again when the client is merged.
type index struct {
	blocks []block
	del    []crange
}

// scan is the first pass over an update: it checks every byte and adds
// what it finds to the index.
func (x *index) scan(ui int, b []byte) error {
	r := &reader{b: b}
	nClients, err := r.uvarint()
	if err != nil {
		return err
	}
	// A client's block takes five bytes or more.
	x.blocks = slices.Grow(x.blocks, int(min(nClients, uint64(r.remaining()/5))))
	for ; nClients > 0; nClients-- {
		blk := block{update: uint32(ui)}
		n, err := r.uvarint()
		if err != nil {
			return err
		}
		if n > uint64(r.remaining())/2 {
			return r.fail("more structs than bytes left") // a struct takes two bytes or more
		}
		blk.n = uint32(n)
		if blk.client, err = r.uvarint(); err != nil {
			return err
		}
		if blk.clock, err = r.uvarint(); err != nil {
			return err
		}
		blk.off = r.pos
		clock, items := blk.clock, false
		for i := blk.n; i > 0; i-- {
			at := r.pos
			s, err := r.readStruct(clock, true)
			if err != nil {
				return err
			}
			if s.refersAhead(blk.client) {
				return &malformedError{off: at, reason: fmt.Sprintf("an item of client %d at clock %d names a struct of its own client at a later clock", blk.client, s.clock)}
			}
			items = items || s.kind != kindSkip
			clock = s.end()
		}
		if items {
			x.blocks = append(x.blocks, blk)
		}
	}
	// The delete set: counted first, so that the index grows once.
	dsStart := r.pos
	count := 0
	for pass := 0; pass < 2; pass++ {
		r.pos = dsStart
		if err := x.readDeleteSet(r, pass == 1, &count); err != nil {
			return err
		}
		if pass == 0 {
			x.del = slices.Grow(x.del, count)
		}
	}
	if r.pos != len(b) {
		return r.fail("bytes after the delete set")
	}
	return nil
}

// readDeleteSet reads a delete set; it counts its ranges, and with store
// adds them to the index.
func (x *index) readDeleteSet(r *reader, store bool, count *int) error {
	nClients, err := r.uvarint()
	if err != nil {
		return err
	}
	for ; nClients > 0; nClients-- {
		client, err := r.uvarint()
		if err != nil {
			return err
		}
		n, err := r.uvarint()
		if err != nil {
			return err
		}
		for ; n > 0; n-- {
			clock, err := r.uvarint()
			if err != nil {
				return err
			}
			l, err := r.uvarint()
			if err != nil {
				return err
			}
			if l > maxSafe-clock {
				return r.fail("a deleted range beyond 2^53-1")
			}
			switch {
			case l == 0:
			case store:
				x.del = appendRange(x.del, crange{client, rng{clock, clock + l}})
			default:
				*count++
			}
		}
	}
	return nil
}

// appendRange appends x, joining it to the last range when they touch
// (the common case of ranges read in order).
func appendRange(rs []crange, x crange) []crange {
	if n := len(rs); n > 0 && rs[n-1].client == x.client && rs[n-1].end >= x.start && rs[n-1].start <= x.start {
		rs[n-1].end = max(rs[n-1].end, x.end)
		return rs
	}
	return append(rs, x)
}
