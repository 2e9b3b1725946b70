// Package rowbuf collects the rows of a store scan for the drivers: in a
// slice sized for the scan's limit once its first rows show it is not
// small (a slice grown row by row by append copies a 10,000-row page
// several times over), with the rows' byte columns cut from shared blocks
// (one allocation per block instead of one per value).
package rowbuf

import (
	"unsafe"

	"github.com/syncgo/syncgo/store"
)

const (
	// firstRows is the capacity of the first allocation: a scan that
	// finds no more rows than this allocates no more than this.
	firstRows = 512
	// maxStep bounds the one step to the limit (a caller's limit is not
	// a promise of rows: a huge one must not allocate for them ahead).
	maxStep = 1 << 16
	// blockBytes is the size of a shared block; a value of a quarter of
	// it or more gets an allocation of its own.
	blockBytes = 64 << 10
)

// Buffer collects rows; the zero value is empty and ready. The byte
// slices it hands out never overlap: each one's capacity ends with its
// length, so appending to one cannot write into another.
type Buffer struct {
	// Limit, when positive, is the number of rows the scan expects at
	// most: once the first firstRows are full the buffer grows to it in
	// one step (to at most 65,536 rows). Beyond that (or without it) the
	// buffer doubles.
	Limit int
	rows  []store.Row
	block []byte
}

// Add appends a row.
func (b *Buffer) Add(r store.Row) {
	b.rows = Append(b.rows, b.Limit, r)
}

// Append appends v to s as Buffer.Add appends a row: a full s grows to
// firstRows, then in one step to limit (at most 65,536), then by
// doubling, instead of append's several copies on the way to a
// 10,000-entry page.
func Append[T any](s []T, limit int, v T) []T {
	if len(s) == cap(s) {
		n := firstRows
		switch {
		case cap(s) == 0:
		case limit > cap(s) && cap(s) < maxStep:
			n = min(limit, maxStep)
		default:
			n = 2 * cap(s)
		}
		grown := make([]T, len(s), n)
		copy(grown, s)
		s = grown
	}
	return append(s, v)
}

// Len is the number of rows added.
func (b *Buffer) Len() int { return len(b.rows) }

// Rows returns the rows added, in order; nil when none were.
func (b *Buffer) Rows() []store.Row { return b.rows }

// Alloc returns a slice of n bytes (length and capacity n) for a value
// to be copied into.
func (b *Buffer) Alloc(n int) []byte {
	if n == 0 || n >= blockBytes/4 {
		return make([]byte, n)
	}
	if cap(b.block)-len(b.block) < n {
		b.block = make([]byte, 0, blockBytes)
	}
	start := len(b.block)
	b.block = b.block[:start+n]
	return b.block[start : start+n : start+n]
}

// String returns b as a string whose bytes are a copy in the buffer's
// blocks (which are never written again): "" for an empty b.
func (b *Buffer) String(src []byte) string {
	if len(src) == 0 {
		return ""
	}
	v := b.Alloc(len(src))
	copy(v, src)
	return unsafe.String(&v[0], len(v))
}

// Copy returns a copy of src in the buffer's blocks: nil for nil, an
// empty slice for an empty one.
func (b *Buffer) Copy(src []byte) []byte {
	if src == nil {
		return nil
	}
	v := b.Alloc(len(src))
	copy(v, src)
	return v
}

// Arena hands out byte slices cut from blocks that grow from 512 bytes,
// doubling up to 32 KiB (a window of a commit or two allocates little),
// one allocation per block instead of one per value; the zero value is
// ready. A block is only ever appended to and a full one is left as it is,
// so what it handed out never changes: strings may point into it.
type Arena struct {
	block []byte
	// used holds the blocks filled before block; spare the blocks a Reset
	// gave back, which Alloc takes before it makes new ones.
	used, spare [][]byte
}

const (
	arenaFirst = 512
	arenaMax   = 32 << 10
)

// Alloc returns a slice of n bytes (length and capacity n) for a value
// to be copied into.
func (a *Arena) Alloc(n int) []byte {
	if cap(a.block)-len(a.block) < n {
		a.grow(n)
	}
	start := len(a.block)
	a.block = a.block[:start+n]
	return a.block[start : start+n : start+n]
}

// grow starts a block with room for n bytes: the next spare one when it
// has the room, else a new one.
func (a *Arena) grow(n int) {
	if cap(a.block) > 0 {
		a.used = append(a.used, a.block)
	}
	if k := len(a.spare) - 1; k >= 0 && cap(a.spare[k]) >= n {
		a.block = a.spare[k][:0]
		a.spare[k] = nil
		a.spare = a.spare[:k]
		return
	}
	a.block = make([]byte, 0, max(n, min(2*cap(a.block), arenaMax), arenaFirst))
}

// Reset gives every block back for the next Allocs to reuse, smallest
// first: the values allocated before are overwritten by the ones after.
// Only for an owner that holds none of them any more.
func (a *Arena) Reset() {
	if cap(a.block) > 0 {
		a.used = append(a.used, a.block)
	}
	for i := len(a.used) - 1; i >= 0; i-- {
		a.spare = append(a.spare, a.used[i])
		a.used[i] = nil
	}
	a.used, a.block = a.used[:0], nil
}

// Copy returns a copy of b in the arena: nil for nil.
func (a *Arena) Copy(b []byte) []byte {
	if b == nil {
		return nil
	}
	v := a.Alloc(len(b))
	copy(v, b)
	return v
}

// String returns b as a string whose bytes are a copy in the arena.
func (a *Arena) String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&a.Copy(b)[0], len(b))
}
