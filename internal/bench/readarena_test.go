package bench

import (
	"bytes"
	"testing"
)

// TestReadArena: reads held keep their bytes when the arena grows; it
// grows only when allowed and up to its largest size, keeps its size,
// and is room again after a reset.
func TestReadArena(t *testing.T) {
	a := newReadArena(readRoom+2048, 4*(readRoom+2048))
	var held [][]byte
	fill := func(grow bool) bool {
		if len(held) > 100 {
			t.Fatalf("%d reads fit, the arena never filled", len(held))
		}
		b, ok := a.room(grow)
		if !ok {
			return false
		}
		if len(b) < readRoom || len(b) > readMax {
			t.Fatalf("room of %d bytes, want %d to %d", len(b), readRoom, readMax)
		}
		m := copy(b, bytes.Repeat([]byte{byte(len(held) + 1)}, 1000))
		a.used(m)
		held = append(held, b[:m])
		return true
	}
	for fill(false) {
	}
	if len(held) != 3 {
		t.Fatalf("%d reads before the first arena is full, want 3", len(held))
	}
	for fill(true) {
	}
	if got, want := len(a.buf), 4*(readRoom+2048); got != want {
		t.Errorf("arena grew to %d bytes, want %d (its largest)", got, want)
	}
	for i, b := range held {
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(i + 1)}, 1000)) {
			t.Fatalf("read %d changed after the arena grew", i)
		}
	}
	if _, ok := a.room(true); ok {
		t.Error("a full arena at its largest gave room")
	}
	size := len(a.buf)
	a.reset()
	if b, ok := a.room(false); !ok || len(b) != readMax || len(a.buf) != size {
		t.Errorf("after reset: room %d (ok %v), arena %d bytes; want %d and the size kept, %d", len(b), ok, len(a.buf), readMax, size)
	}
}
