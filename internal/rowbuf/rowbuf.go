// Package rowbuf collects the rows of a store scan for the drivers: in
// chunks of fixed size joined once at the end (a slice grown row by row
// copies a 10,000-row page several times over), with the rows' byte
// columns cut from shared blocks (one allocation per block instead of one
// per value).
package rowbuf

import "github.com/syncgo/syncgo/store"

const (
	chunkRows = 512
	// blockBytes is the size of a shared block; a value of a quarter of
	// it or more gets an allocation of its own.
	blockBytes = 64 << 10
)

// Buffer collects rows; the zero value is empty and ready. The byte
// slices it hands out never overlap: each one's capacity ends with its
// length, so appending to one cannot write into another.
type Buffer struct {
	full  [][]store.Row
	cur   []store.Row
	n     int
	block []byte
}

// Add appends a row.
func (b *Buffer) Add(r store.Row) {
	if len(b.cur) == cap(b.cur) {
		if b.cur != nil {
			b.full = append(b.full, b.cur)
		}
		b.cur = make([]store.Row, 0, chunkRows)
	}
	b.cur = append(b.cur, r)
	b.n++
}

// Len is the number of rows added.
func (b *Buffer) Len() int { return b.n }

// Rows returns the rows added, in order; nil when none were.
func (b *Buffer) Rows() []store.Row {
	if len(b.full) == 0 {
		return b.cur
	}
	out := make([]store.Row, 0, b.n)
	for _, c := range b.full {
		out = append(out, c...)
	}
	return append(out, b.cur...)
}

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
