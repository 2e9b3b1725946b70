package rowbuf

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/syncgo/syncgo/store"
)

func TestBufferKeepsOrderAndBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, limit int }{
		{0, 0}, {1, 0}, {firstRows, 0}, {firstRows + 1, 0}, {3*firstRows + 7, 0},
		{firstRows + 1, firstRows + 1}, {3*firstRows + 7, 2 * firstRows}, {10, 10_000}, {firstRows + 1, 1 << 40},
	} {
		t.Run(fmt.Sprint(c.n, "/", c.limit), func(t *testing.T) {
			t.Parallel()
			n := c.n
			b := Buffer{Limit: c.limit}
			for i := range n {
				payload := bytes.Repeat([]byte{byte(i)}, i%300)
				if i%97 == 0 {
					payload = bytes.Repeat([]byte{byte(i)}, blockBytes/4+i) // its own allocation
				}
				b.Add(store.Row{RowID: fmt.Sprintf("r%06d", i), Payload: b.Copy(payload)})
			}
			got := b.Rows()
			if len(got) != n || b.Len() != n {
				t.Fatalf("Rows() = %d rows, Len() = %d; want %d", len(got), b.Len(), n)
			}
			if want := min(c.limit, maxStep); n > firstRows && n <= want && cap(got) != want {
				t.Fatalf("%d rows under a limit of %d: capacity %d, want %d", n, c.limit, cap(got), want)
			}
			if n == 0 && got != nil {
				t.Fatalf("Rows() of an empty buffer = %#v, want nil", got)
			}
			for i, r := range got {
				want := bytes.Repeat([]byte{byte(i)}, i%300)
				if i%97 == 0 {
					want = bytes.Repeat([]byte{byte(i)}, blockBytes/4+i)
				}
				if r.RowID != fmt.Sprintf("r%06d", i) || !bytes.Equal(r.Payload, want) {
					t.Fatalf("row %d = %s with %d payload bytes, want r%06d with %d", i, r.RowID, len(r.Payload), i, len(want))
				}
				if cap(r.Payload) != len(r.Payload) {
					t.Fatalf("row %d: payload capacity %d beyond its length %d", i, cap(r.Payload), len(r.Payload))
				}
			}
		})
	}
}

// An append to one value must not write into the next one.
func TestBufferValuesDoNotOverlap(t *testing.T) {
	t.Parallel()
	var b Buffer
	first := b.Copy([]byte("ab"))
	second := b.Copy([]byte("cd"))
	_ = append(first, 'x')
	if string(second) != "cd" {
		t.Fatalf("second value = %q after an append to the first, want cd", second)
	}
}

func TestCopyNilAndEmpty(t *testing.T) {
	t.Parallel()
	var b Buffer
	if got := b.Copy(nil); got != nil {
		t.Errorf("Copy(nil) = %#v, want nil", got)
	}
	if got := b.Copy([]byte{}); got == nil || len(got) != 0 {
		t.Errorf("Copy(empty) = %#v, want an empty non-nil slice", got)
	}
}

// An arena's values never overlap nor change as more are cut, across
// blocks, and a string it returns keeps its bytes.
func TestArena(t *testing.T) {
	var a Arena
	var vals [][]byte
	var strs []string
	for i := range 3000 {
		v := bytes.Repeat([]byte{byte(i)}, i%50+1)
		vals = append(vals, a.Copy(v))
		strs = append(strs, a.String(v))
	}
	for i := range 3000 {
		want := bytes.Repeat([]byte{byte(i)}, i%50+1)
		if !bytes.Equal(vals[i], want) || strs[i] != string(want) || cap(vals[i]) != len(vals[i]) {
			t.Fatalf("value %d changed: %v %q", i, vals[i], strs[i])
		}
	}
	if a.Copy(nil) != nil || a.String(nil) != "" || len(a.Alloc(0)) != 0 {
		t.Error("nil and empty values")
	}
}

// TestArenaReset: after a Reset the arena reuses its blocks (a second
// fill of the same sizes allocates nothing), the values allocated after
// it are whole, and a value larger than any block gets its own.
func TestArenaReset(t *testing.T) {
	var a Arena
	fill := func(round int) [][]byte {
		var vals [][]byte
		for i := range 3000 {
			vals = append(vals, a.Copy(bytes.Repeat([]byte{byte(i + round)}, i%50+1)))
		}
		return vals
	}
	fill(0)
	a.Reset()
	vals := fill(1)
	big := a.Copy(bytes.Repeat([]byte{7}, 3*arenaMax))
	for i, v := range vals {
		if want := bytes.Repeat([]byte{byte(i + 1)}, i%50+1); !bytes.Equal(v, want) || cap(v) != len(v) {
			t.Fatalf("value %d after a Reset: %v, want %v", i, v, want)
		}
	}
	if !bytes.Equal(big, bytes.Repeat([]byte{7}, 3*arenaMax)) {
		t.Fatal("the large value changed")
	}
	a.Reset()
	if n := testing.AllocsPerRun(5, func() {
		for i := range 3000 {
			a.Alloc(i%50 + 1)
		}
		a.Reset()
	}); n != 0 {
		t.Errorf("a fill after a Reset made %v allocations, want 0", n)
	}
}

// TestAppendGrowth: Append keeps the values in order and grows a slice to
// firstRows, then to the limit in one step, then by doubling; no step of
// a 10,000-entry page under a limit of 10,001 copies it twice.
func TestAppendGrowth(t *testing.T) {
	var s []string
	caps := map[int]bool{}
	for i := range 25_000 {
		s = Append(s, 10_001, strconv.Itoa(i))
		caps[cap(s)] = true
	}
	for i, v := range s {
		if v != strconv.Itoa(i) {
			t.Fatalf("value %d is %q", i, v)
		}
	}
	want := map[int]bool{firstRows: true, 10_001: true, 20_002: true, 40_004: true}
	if len(caps) != len(want) {
		t.Fatalf("capacities %v, want %v", caps, want)
	}
	for c := range want {
		if !caps[c] {
			t.Fatalf("capacities %v, want %v", caps, want)
		}
	}
}

// TestBufferString: strings cut from the blocks keep their bytes while
// more values are cut after them and the source is reused.
func TestBufferString(t *testing.T) {
	var b Buffer
	src := make([]byte, 0, 16)
	var got []string
	for i := range 5000 {
		src = strconv.AppendInt(src[:0], int64(i), 10)
		got = append(got, b.String(src))
		b.Copy(bytes.Repeat([]byte{0xee}, i%40))
	}
	for i, s := range got {
		if s != strconv.Itoa(i) {
			t.Fatalf("string %d is %q", i, s)
		}
	}
	if b.String(nil) != "" || b.String([]byte{}) != "" {
		t.Fatal("empty source")
	}
}
