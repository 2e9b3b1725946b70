package yjs

// A minimal Yjs document reader, for the tests only: it integrates an
// update into a fresh document the way Y.applyUpdate does (the YATA
// conflict resolution of Item.integrate, splits, map entries, deletions,
// garbage-collected parents) and renders the document in the canonical
// form of tools/yjs-equivalence/gen.mjs (canon). It lets the Go tests
// assert that a merged update gives the document Yjs computed, without
// node.

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strings"
	"unicode/utf16"
)

// Shared type kinds (typeRefs).
const (
	tArray = iota
	tMap
	tText
	tXMLElement
	tXMLFragment
	tXMLHook
	tXMLText
)

type dType struct {
	kind  int
	name  string // XML node or hook name
	item  *dItem // nil for a root
	start *dItem
	m     map[string]*dItem // the rightmost item of each key
}

type dContent struct {
	ref    byte
	str    []uint16 // ContentString, in UTF-16 units
	elems  []any    // ContentAny, ContentJSON (canonical values)
	n      uint64   // ContentDeleted
	value  any      // Binary, Embed, Doc (canonical)
	key    string   // ContentFormat
	fmtVal any      // ContentFormat
	typ    *dType   // ContentType
}

func (c *dContent) countable() bool { return c.ref != refDeleted && c.ref != refFormat }

// splice cuts the content at offset, returns the right part.
func (c *dContent) splice(off uint64) dContent {
	r := dContent{ref: c.ref}
	switch c.ref {
	case refDeleted:
		r.n, c.n = c.n-off, off
	case refString:
		right := slices.Clone(c.str[off:])
		c.str = c.str[:off:off]
		if last := c.str[off-1]; last >= 0xd800 && last <= 0xdbff {
			c.str = append(c.str[:off-1:off-1], 0xfffd)
			right[0] = 0xfffd
		}
		r.str = right
	case refAny, refJSON:
		r.elems = slices.Clone(c.elems[off:])
		c.elems = c.elems[:off:off]
	default:
		panic("splice of an unsplittable content")
	}
	return r
}

type dItem struct {
	client, clock, length uint64
	gc                    bool
	origin, rightOrigin   *id
	left, right           *dItem
	parent                *dType
	parentID              *id
	parentKey             *string
	parentSub             *string
	deleted               bool
	content               dContent
}

func (it *dItem) lastID() id { return id{it.client, it.clock + it.length - 1} }

type dDoc struct {
	roots   map[string]*dType
	clients map[uint64][]*dItem
}

func (d *dDoc) root(name string, kind int) *dType {
	t := d.roots[name]
	if t == nil {
		t = &dType{kind: kind, m: map[string]*dItem{}}
		d.roots[name] = t
	}
	return t
}

func (d *dDoc) state(client uint64) uint64 {
	s := d.clients[client]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].clock + s[len(s)-1].length
}

func (d *dDoc) find(x id) (int, *dItem) {
	s := d.clients[x.client]
	i := sort.Search(len(s), func(i int) bool { return s[i].clock+s[i].length > x.clock })
	if i == len(s) || s[i].clock > x.clock {
		panic(fmt.Sprintf("no struct at %d:%d", x.client, x.clock))
	}
	return i, s[i]
}

// split cuts it at diff and returns the right part.
func (d *dDoc) split(it *dItem, diff uint64) *dItem {
	r := &dItem{client: it.client, clock: it.clock + diff, length: it.length - diff,
		origin: &id{it.client, it.clock + diff - 1}, left: it, right: it.right,
		rightOrigin: it.rightOrigin, parent: it.parent, parentSub: it.parentSub, deleted: it.deleted,
		content: it.content.splice(diff)}
	it.length = diff
	it.right = r
	if r.right != nil {
		r.right.left = r
	}
	i, _ := d.find(id{it.client, it.clock})
	s := d.clients[it.client]
	d.clients[it.client] = slices.Insert(s, i+1, r)
	if r.parentSub != nil && r.right == nil {
		r.parent.m[*r.parentSub] = r
	}
	return r
}

func (d *dDoc) cleanStart(x id) *dItem {
	_, it := d.find(x)
	if !it.gc && it.clock < x.clock {
		return d.split(it, x.clock-it.clock)
	}
	return it
}

func (d *dDoc) cleanEnd(x id) *dItem {
	_, it := d.find(x)
	if !it.gc && x.clock != it.clock+it.length-1 {
		d.split(it, x.clock-it.clock+1)
	}
	return it
}

func sameID(a, b *id) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func (d *dDoc) addGC(it *dItem) {
	g := &dItem{client: it.client, clock: it.clock, length: it.length, gc: true, deleted: true}
	d.clients[it.client] = append(d.clients[it.client], g)
}

// integrate is Item.getMissing (after the missing check) and
// Item.integrate with offset 0.
func (d *dDoc) integrate(it *dItem) {
	if it.gc {
		d.clients[it.client] = append(d.clients[it.client], it)
		return
	}
	if it.origin != nil {
		it.left = d.cleanEnd(*it.origin)
		o := it.left.lastID()
		it.origin = &o
	}
	if it.rightOrigin != nil {
		it.right = d.cleanStart(*it.rightOrigin)
		r := id{it.right.client, it.right.clock}
		it.rightOrigin = &r
	}
	switch {
	case it.left != nil && it.left.gc || it.right != nil && it.right.gc:
		it.parent = nil
	case it.parentID == nil && it.parentKey == nil:
		if it.left != nil {
			it.parent, it.parentSub = it.left.parent, it.left.parentSub
		} else if it.right != nil {
			it.parent, it.parentSub = it.right.parent, it.right.parentSub
		}
	case it.parentID != nil:
		_, p := d.find(*it.parentID)
		if !p.gc {
			it.parent = p.content.typ // nil unless a type
		}
	default:
		it.parent = d.root(*it.parentKey, -1)
	}
	if it.parent == nil {
		d.addGC(it)
		return
	}
	p := it.parent
	if it.left == nil && (it.right == nil || it.right.left != nil) || it.left != nil && it.left.right != it.right {
		left := it.left
		var o *dItem
		switch {
		case left != nil:
			o = left.right
		case it.parentSub != nil:
			o = p.m[*it.parentSub]
			for o != nil && o.left != nil {
				o = o.left
			}
		default:
			o = p.start
		}
		conflicting := map[*dItem]bool{}
		before := map[*dItem]bool{}
		for o != nil && o != it.right {
			before[o] = true
			conflicting[o] = true
			if sameID(it.origin, o.origin) {
				if o.client < it.client {
					left = o
					clear(conflicting)
				} else if sameID(it.rightOrigin, o.rightOrigin) {
					break
				}
			} else if o.origin != nil {
				_, oo := d.find(*o.origin)
				if !before[oo] {
					break
				}
				if !conflicting[oo] {
					left = o
					clear(conflicting)
				}
			} else {
				break
			}
			o = o.right
		}
		it.left = left
	}
	if it.left != nil {
		it.right = it.left.right
		it.left.right = it
	} else {
		var r *dItem
		if it.parentSub != nil {
			r = p.m[*it.parentSub]
			for r != nil && r.left != nil {
				r = r.left
			}
		} else {
			r = p.start
			p.start = it
		}
		it.right = r
	}
	if it.right != nil {
		it.right.left = it
	} else if it.parentSub != nil {
		p.m[*it.parentSub] = it
		if it.left != nil {
			d.delete(it.left)
		}
	}
	d.clients[it.client] = append(d.clients[it.client], it)
	switch it.content.ref {
	case refDeleted:
		it.deleted = true
	case refType:
		it.content.typ.item = it
	}
	if p.item != nil && p.item.deleted || it.parentSub != nil && it.right != nil {
		d.delete(it)
	}
}

func (d *dDoc) delete(it *dItem) {
	if it.deleted {
		return
	}
	it.deleted = true
	if t := it.content.typ; it.content.ref == refType && t != nil {
		for c := t.start; c != nil; c = c.right {
			d.delete(c)
		}
		for _, c := range t.m {
			d.delete(c)
		}
	}
}

// readDoc applies update to a fresh document.
func readDoc(update []byte) (*dDoc, error) {
	d := &dDoc{roots: map[string]*dType{}, clients: map[uint64][]*dItem{}}
	if len(update) == 0 {
		return d, nil
	}
	r := &reader{b: update}
	queues := map[uint64][]*dItem{}
	var order []uint64
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	for ; n > 0; n-- {
		ns, _ := r.uvarint()
		client, _ := r.uvarint()
		clock, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		if _, seen := queues[client]; !seen {
			order = append(order, client)
		}
		for ; ns > 0; ns-- {
			it, err := readDocStruct(r, client, clock)
			if err != nil {
				return nil, err
			}
			clock += it.length
			if it.content.ref != infoSkip {
				queues[client] = append(queues[client], it)
			}
		}
	}
	// Integrate in any causal order until nothing more can be (the rest
	// stays pending, as in Yjs).
	for progress := true; progress; {
		progress = false
		for _, c := range order {
			for len(queues[c]) > 0 {
				it := queues[c][0]
				if it.clock != d.state(c) || !d.ready(it) {
					break
				}
				queues[c] = queues[c][1:]
				d.integrate(it)
				progress = true
			}
		}
	}
	nd, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	for ; nd > 0; nd-- {
		client, _ := r.uvarint()
		k, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		for ; k > 0; k-- {
			clock, _ := r.uvarint()
			l, err := r.uvarint()
			if err != nil {
				return nil, err
			}
			d.deleteRange(client, clock, clock+l)
		}
	}
	return d, nil
}

func (d *dDoc) ready(it *dItem) bool {
	for _, x := range []*id{it.origin, it.rightOrigin, it.parentID} {
		if x != nil && x.client != it.client && x.clock >= d.state(x.client) {
			return false
		}
	}
	return true
}

func (d *dDoc) deleteRange(client, start, end uint64) {
	if end > d.state(client) {
		end = d.state(client) // the rest is pending
	}
	if start >= end {
		return
	}
	first := d.cleanStart(id{client, start})
	i, _ := d.find(id{client, first.clock})
	for ; i < len(d.clients[client]); i++ {
		it := d.clients[client][i]
		if it.clock >= end {
			break
		}
		if !it.deleted {
			if end < it.clock+it.length {
				d.split(it, end-it.clock)
			}
			d.delete(it)
		}
	}
}

func readDocStruct(r *reader, client, clock uint64) (*dItem, error) {
	info, err := r.byte1()
	if err != nil {
		return nil, err
	}
	it := &dItem{client: client, clock: clock}
	switch info & infoRefMask {
	case 0:
		it.gc, it.deleted = true, true
		it.length, err = r.uvarint()
		return it, err
	case infoSkip:
		it.content.ref = infoSkip
		it.length, err = r.uvarint()
		return it, err
	}
	if info&infoOrigin != 0 {
		x, err := r.readID()
		if err != nil {
			return nil, err
		}
		it.origin = &x
	}
	if info&infoRightOrigin != 0 {
		x, err := r.readID()
		if err != nil {
			return nil, err
		}
		it.rightOrigin = &x
	}
	if info&(infoOrigin|infoRightOrigin) == 0 {
		k, _ := r.uvarint()
		if k == 1 {
			s, _, err := r.varString(true)
			if err != nil {
				return nil, err
			}
			key := string(s)
			it.parentKey = &key
		} else {
			x, err := r.readID()
			if err != nil {
				return nil, err
			}
			it.parentID = &x
		}
		if info&infoParentSub != 0 {
			s, _, err := r.varString(true)
			if err != nil {
				return nil, err
			}
			sub := string(s)
			it.parentSub = &sub
		}
	}
	c := &it.content
	c.ref = info & infoRefMask
	it.length = 1
	switch c.ref {
	case refDeleted:
		c.n, err = r.uvarint()
		it.length = c.n
	case refJSON:
		var k uint64
		k, err = r.uvarint()
		for ; k > 0 && err == nil; k-- {
			var s []byte
			if s, _, err = r.varString(true); err == nil {
				var v any = map[string]any{"$undefined": true}
				if string(s) != "undefined" {
					err = json.Unmarshal(s, &v)
				}
				c.elems = append(c.elems, v)
			}
		}
		it.length = uint64(len(c.elems))
	case refBinary:
		var b []byte
		b, err = r.varBytes()
		c.value = map[string]any{"$bytes": hex.EncodeToString(b)}
	case refString:
		var s []byte
		s, _, err = r.varString(true)
		c.str = utf16.Encode([]rune(string(s)))
		it.length = uint64(len(c.str))
	case refEmbed:
		c.value, err = readJSONValue(r)
	case refFormat:
		var k []byte
		if k, _, err = r.varString(true); err == nil {
			c.key = string(k)
			c.fmtVal, err = readJSONValue(r)
		}
	case refType:
		var t uint64
		t, err = r.uvarint()
		c.typ = &dType{kind: int(t), m: map[string]*dItem{}}
		if t == typeXMLElement || t == typeXMLHook {
			var s []byte
			s, _, err = r.varString(true)
			c.typ.name = string(s)
		}
	case refAny:
		var k uint64
		k, err = r.uvarint()
		for ; k > 0 && err == nil; k-- {
			var v any
			v, err = readAnyValue(r)
			c.elems = append(c.elems, v)
		}
		it.length = uint64(len(c.elems))
	case refDoc:
		var g []byte
		if g, _, err = r.varString(true); err == nil {
			c.value = map[string]any{"$doc": string(g)}
			_, err = readAnyValue(r)
		}
	default:
		err = fmt.Errorf("content ref %d", c.ref)
	}
	return it, err
}

func readJSONValue(r *reader) (any, error) {
	s, _, err := r.varString(true)
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(s, &v)
}

func number(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// readAnyValue decodes a lib0 "any" value into its canonical form.
func readAnyValue(r *reader) (any, error) {
	tag, err := r.byte1()
	if err != nil {
		return nil, err
	}
	switch tag {
	case anyUndefined:
		return map[string]any{"$undefined": true}, nil
	case anyNull:
		return nil, nil
	case anyInteger:
		c, err := r.byte1()
		if err != nil {
			return nil, err
		}
		v, neg, shift := float64(c&0x3f), c&0x40 != 0, 64.0
		for c >= 0x80 {
			if c, err = r.byte1(); err != nil {
				return nil, err
			}
			v += float64(c&0x7f) * shift
			shift *= 128
		}
		if neg {
			v = -v
		}
		return v, nil
	case anyFloat32:
		b, err := r.take(4)
		if err != nil {
			return nil, err
		}
		return number(float64(math.Float32frombits(binary.BigEndian.Uint32(b)))), nil
	case anyFloat64:
		b, err := r.take(8)
		if err != nil {
			return nil, err
		}
		return number(math.Float64frombits(binary.BigEndian.Uint64(b))), nil
	case anyBigInt:
		b, err := r.take(8)
		if err != nil {
			return nil, err
		}
		return map[string]any{"$bigint": big.NewInt(int64(binary.BigEndian.Uint64(b))).String()}, nil
	case anyFalse:
		return false, nil
	case anyTrue:
		return true, nil
	case anyString:
		s, _, err := r.varString(true)
		return string(s), err
	case anyBytes:
		b, err := r.varBytes()
		return map[string]any{"$bytes": hex.EncodeToString(b)}, err
	case anyArray:
		n, err := r.uvarint()
		out := []any{}
		for ; n > 0 && err == nil; n-- {
			var v any
			v, err = readAnyValue(r)
			out = append(out, v)
		}
		return out, err
	case anyObject:
		n, err := r.uvarint()
		out := map[string]any{}
		for ; n > 0 && err == nil; n-- {
			var k []byte
			if k, _, err = r.varString(true); err == nil {
				var v any
				v, err = readAnyValue(r)
				out[string(k)] = v
			}
		}
		return out, err
	}
	return nil, fmt.Errorf("any tag %d", tag)
}

// canonical renders the document as gen.mjs's docJSON does.
func (d *dDoc) canonical() any {
	return map[string]any{
		"text":  d.root("text", tText).canon(tText),
		"map":   d.root("map", tMap).canon(tMap),
		"array": d.root("array", tArray).canon(tArray),
		"xml":   d.root("xml", tXMLFragment).canon(tXMLFragment),
	}
}

func (t *dType) canon(kind int) any {
	switch kind {
	case tText:
		return map[string]any{"$text": t.delta()}
	case tMap:
		m := map[string]any{}
		for k, it := range t.m {
			if !it.deleted {
				m[k] = it.lastValue()
			}
		}
		return map[string]any{"$map": m}
	case tArray:
		a := []any{}
		for it := t.start; it != nil; it = it.right {
			if !it.deleted && it.content.countable() {
				a = append(a, it.values()...)
			}
		}
		return map[string]any{"$array": a}
	}
	return map[string]any{"$xml": t.xml()}
}

func (it *dItem) values() []any {
	c := &it.content
	switch c.ref {
	case refAny, refJSON:
		return c.elems
	case refType:
		return []any{c.typ.canon(c.typ.kind)}
	case refString:
		out := []any{}
		for _, u := range c.str {
			out = append(out, string(utf16.Decode([]uint16{u})))
		}
		return out
	}
	return []any{c.value}
}

func (it *dItem) lastValue() any {
	v := it.values()
	return v[len(v)-1]
}

func (t *dType) delta() []any {
	out := []any{}
	attrs := map[string]any{}
	var run []uint16
	attrsOf := func() any {
		if len(attrs) == 0 {
			return nil
		}
		return cloneMap(attrs)
	}
	var runAttrs any
	flush := func() {
		if len(run) > 0 {
			push(&out, string(utf16.Decode(run)), runAttrs)
			run = nil
		}
	}
	for it := t.start; it != nil; it = it.right {
		if it.deleted {
			continue
		}
		switch it.content.ref {
		case refString:
			if a := attrsOf(); len(run) > 0 && !equalJSON(a, runAttrs) {
				flush()
			}
			runAttrs = attrsOf()
			run = append(run, it.content.str...)
		case refFormat:
			flush()
			if it.content.fmtVal == nil {
				delete(attrs, it.content.key)
			} else {
				attrs[it.content.key] = it.content.fmtVal
			}
		case refEmbed, refType:
			flush()
			push(&out, it.values()[0], attrsOf())
		}
	}
	flush()
	return out
}

// push appends an insert op, joining string runs of equal attributes.
func push(out *[]any, insert, attrs any) {
	if s, ok := insert.(string); ok && len(*out) > 0 {
		last := (*out)[len(*out)-1].(map[string]any)
		if ls, ok := last["insert"].(string); ok && equalJSON(last["attributes"], attrs) {
			last["insert"] = ls + s
			return
		}
	}
	op := map[string]any{"insert": insert}
	if attrs != nil {
		op["attributes"] = attrs
	}
	*out = append(*out, op)
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (t *dType) xml() string {
	var b strings.Builder
	for it := t.start; it != nil; it = it.right {
		if it.deleted || !it.content.countable() {
			continue
		}
		switch it.content.ref {
		case refType:
			b.WriteString(it.content.typ.xmlNode())
		case refString:
			b.WriteString(string(utf16.Decode(it.content.str)))
		}
	}
	return b.String()
}

func (t *dType) xmlNode() string {
	switch t.kind {
	case tXMLText:
		return t.xml()
	case tXMLElement:
		keys := []string{}
		for k, it := range t.m {
			if !it.deleted {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var attrs strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&attrs, " %s=\"%v\"", k, t.m[k].lastValue())
		}
		name := strings.ToLower(t.name)
		return "<" + name + attrs.String() + ">" + t.xml() + "</" + name + ">"
	}
	return t.xml()
}
