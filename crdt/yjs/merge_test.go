package yjs

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// enc concatenates lib0 pieces: an int is a varuint, a string a
// varString, a []byte raw bytes.
func enc(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			b = appendUvarint(b, uint64(v))
		case uint64:
			b = appendUvarint(b, v)
		case string:
			b = appendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		case byte:
			b = append(b, v)
		default:
			panic("enc: unexpected piece")
		}
	}
	return b
}

// Item infos of the handmade updates.
const (
	strRoot   = byte(refString)               // no origins: parent info follows
	strAfter  = byte(refString | infoOrigin)  // after an origin
	delAfter  = byte(refDeleted | infoOrigin) // deleted, after an origin
	anyRootKV = byte(refAny | infoParentSub)  // a map entry of a root type
)

// textUpdate is one client's update inserting s into root text "t".
func textUpdate(client int, s string) []byte {
	return enc(1, 1, client, 0, strRoot, 1, "t", s, 0)
}

func mustMerge(t *testing.T, m Merger, in ...[]byte) []byte {
	t.Helper()
	out, err := m.MergeUpdates(in...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func textOf(t *testing.T, update []byte) string {
	t.Helper()
	d, err := readDoc(update)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for it := d.root("t", tText).start; it != nil; it = it.right {
		if !it.deleted && it.content.ref == refString {
			b.WriteString(string(utf16Decode(it.content.str)))
		}
	}
	return b.String()
}

func TestEmptyDocument(t *testing.T) {
	t.Parallel()
	var m Merger
	for _, in := range [][][]byte{{nil, nil}, {{}, {}}, {{0, 0}}, {nil, {0, 0}}} {
		if got := mustMerge(t, m, in...); !bytes.Equal(got, []byte{0, 0}) {
			t.Errorf("%v: %x, want the empty update 0000", in, got)
		}
	}
}

func TestConcurrentTextMerges(t *testing.T) {
	t.Parallel()
	var m Merger
	a, b := textUpdate(7, "hello"), textUpdate(3, "world")
	ab, ba := mustMerge(t, m, a, b), mustMerge(t, m, b, a)
	if !bytes.Equal(ab, ba) {
		t.Fatalf("a·b = %x, b·a = %x", ab, ba)
	}
	// Both start the text: the lower client goes first (YATA).
	if got := textOf(t, ab); got != "worldhello" {
		t.Errorf("text %q, want worldhello", got)
	}
	if again := mustMerge(t, m, ab, a, b); !bytes.Equal(again, ab) {
		t.Errorf("merging the inputs again changed the value")
	}
}

// TestDeletedContentDropped: a deleted range keeps its clocks and
// position as ContentDeleted, and adjacent pieces of one insert join.
func TestDeletedContentDropped(t *testing.T) {
	t.Parallel()
	var m Merger
	insert := textUpdate(5, "abcdef")
	del := enc(0, 1, 5, 1, 2, 3) // delete clocks 2..4 of client 5
	got := mustMerge(t, m, insert, del)
	want := enc(1, 3, 5, 0,
		strRoot, 1, "t", "ab",
		delAfter, 5, 1, 3,
		strAfter, 5, 4, "f",
		1, 5, 1, 2, 3)
	if !bytes.Equal(got, want) {
		t.Fatalf("merged %x\n  want %x", got, want)
	}
	if s := textOf(t, got); s != "abf" {
		t.Errorf("text %q, want abf", s)
	}
}

// TestGapsBecomeSkips: clocks no input carries are skipped, and a later
// input filling them in makes one struct again.
func TestGapsBecomeSkips(t *testing.T) {
	t.Parallel()
	var m Merger
	first := enc(1, 1, 9, 0, strRoot, 1, "t", "ab", 0)
	third := enc(1, 1, 9, 4, strAfter, 9, 3, "ef", 0)
	second := enc(1, 1, 9, 2, strAfter, 9, 1, "cd", 0)
	gap := mustMerge(t, m, third, first)
	want := enc(1, 3, 9, 0, strRoot, 1, "t", "ab", byte(infoSkip), 2, strAfter, 9, 3, "ef", 0)
	if !bytes.Equal(gap, want) {
		t.Fatalf("merged %x\n  want %x", gap, want)
	}
	if s := textOf(t, gap); s != "ab" {
		t.Errorf("text %q, want ab (the rest waits for its dependency)", s)
	}
	full := mustMerge(t, m, gap, second)
	if want := enc(1, 1, 9, 0, strRoot, 1, "t", "abcdef", 0); !bytes.Equal(full, want) {
		t.Fatalf("merged %x\n  want %x", full, want)
	}
}

// TestCollectedWins: a range an input garbage-collected stays a GC, and
// what other inputs carry around it is sliced off it.
func TestCollectedWins(t *testing.T) {
	t.Parallel()
	var m Merger
	item := textUpdate(4, "abc")
	gc := enc(1, 2, 4, 0, strRoot, 1, "t", "a", byte(0), 1, 0)
	ab, ba := mustMerge(t, m, item, gc), mustMerge(t, m, gc, item)
	if !bytes.Equal(ab, ba) {
		t.Fatalf("order matters: %x / %x", ab, ba)
	}
	want := enc(1, 3, 4, 0, strRoot, 1, "t", "a", byte(0), 1, strAfter, 4, 1, "c", 1, 4, 1, 1, 1)
	if !bytes.Equal(ab, want) {
		t.Fatalf("merged %x\n  want %x", ab, want)
	}
}

// TestOverlapsSliced: an input that starts inside a struct another input
// carries contributes only its new clocks; a split surrogate pair becomes
// U+FFFD on both sides, as ContentString.splice does.
func TestOverlapsSliced(t *testing.T) {
	t.Parallel()
	var m Merger
	long := textUpdate(2, "a😀bc")                           // clocks 0..4, the pair at 1-2
	tail := enc(1, 1, 2, 2, strAfter, 2, 1, "\uFFFDbcd", 0) // clocks 2..5
	got := mustMerge(t, m, long, tail)
	want := enc(1, 1, 2, 0, strRoot, 1, "t", "a😀bcd", 0)
	if !bytes.Equal(got, want) {
		t.Fatalf("merged %x\n  want %x", got, want)
	}
	if s := textOf(t, got); s != "a😀bcd" {
		t.Errorf("text %q", s)
	}
	// A deletion of the pair's second half splits it.
	half := mustMerge(t, m, long, enc(0, 1, 2, 1, 2, 1))
	if s := textOf(t, half); s != "a\uFFFDbc" {
		t.Errorf("text %q, want a\\uFFFDbc", s)
	}
}

func TestMapEntries(t *testing.T) {
	t.Parallel()
	var m Merger
	set := func(client int, v string) []byte {
		return enc(1, 1, client, 0, anyRootKV, 1, "m", "k", 1, byte(anyString), v, 0)
	}
	a, b := set(1, "one"), set(2, "two")
	ab := mustMerge(t, m, a, b)
	if !bytes.Equal(ab, mustMerge(t, m, b, a)) {
		t.Fatal("order matters")
	}
	d, err := readDoc(ab)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.root("m", tMap).m["k"].lastValue(); v != "two" {
		t.Errorf("m.k = %v, want two (the higher client wins)", v)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	var m Merger
	bad := map[string][]byte{
		"truncated":            {1, 1},
		"trailing bytes":       {0, 0, 0},
		"content ref 11":       enc(1, 1, 1, 0, byte(11), 1, "t", 0),
		"content ref 31":       enc(1, 1, 1, 0, byte(31), 0),
		"type ref 7":           enc(1, 1, 1, 0, byte(refType), 1, "t", 7, 0),
		"invalid UTF-8":        enc(1, 1, 1, 0, strRoot, 1, "t", "\xff\xfe", 0),
		"surrogate in UTF-8":   enc(1, 1, 1, 0, strRoot, 1, "t", "\xed\xa0\x80", 0),
		"bad JSON embed":       enc(1, 1, 1, 0, byte(refEmbed), 1, "t", "{x", 0),
		"undefined embed":      enc(1, 1, 1, 0, byte(refEmbed), 1, "t", "undefined", 0),
		"bad JSON element":     enc(1, 1, 1, 0, byte(refJSON), 1, "t", 2, "1", "[", 0),
		"unknown any tag":      enc(1, 1, 1, 0, byte(refAny), 1, "t", 1, byte(115), 0),
		"null subdoc options":  enc(1, 1, 1, 0, byte(refDoc), 1, "t", "guid", byte(anyNull), 0),
		"long varuint":         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
		"varuint past 2^53":    enc(uint64(1<<53), 0),
		"clock past 2^53":      enc(1, 1, 1, uint64(maxSafe), byte(0), 2, 0),
		"zero-length GC":       enc(1, 1, 1, 0, byte(0), 0, 0),
		"empty string item":    enc(1, 1, 1, 0, strRoot, 1, "t", "", 0),
		"deleted range past":   enc(0, 1, 1, 1, uint64(maxSafe), 5),
		"any nested too deep":  append(enc(1, 1, 1, 0, byte(refAny), 1, "t", 1), bytes.Repeat([]byte{anyArray, 1}, maxAnyDepth+2)...),
		"string past the end":  enc(1, 1, 1, 0, strRoot, 1, "t", 200, "ab"),
		"parent name past end": enc(1, 1, 1, 0, strRoot, 1, 9),
		"a client twice":       enc(2, 1, 1, 0, byte(0), 1, 1, 1, 5, byte(0), 1, 0),
	}
	for name, b := range bad {
		if _, err := m.MergeUpdates(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
		if _, err := m.Merge(textUpdate(1, "ok"), b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s as incoming: err %v, want ErrMalformed", name, err)
		}
		if err := Validate(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Validate says %v", name, err)
		}
	}
	// Every strict prefix of a real update is refused.
	for _, fx := range loadFixtures(t)[:20] {
		for _, in := range fx.Inputs {
			for n := 1; n < len(in); n++ {
				if _, err := m.MergeUpdates(in[:n]); !errors.Is(err, ErrMalformed) {
					t.Fatalf("seed %d: a %d-byte prefix of a %d-byte update: err %v", fx.Seed, n, len(in), err)
				}
			}
		}
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	a, b := textUpdate(1, strings.Repeat("a", 100)), textUpdate(2, strings.Repeat("b", 100))
	if _, err := (Merger{MaxBytes: 150}).Merge(a, b); !errors.Is(err, ErrTooLarge) {
		t.Errorf("merge over the bound: err %v, want ErrTooLarge", err)
	}
	if _, err := (Merger{MaxBytes: 50}).Merge(nil, a); !errors.Is(err, ErrTooLarge) {
		t.Errorf("input over the bound: err %v, want ErrTooLarge", err)
	}
	if _, err := (Merger{MaxBytes: 300}).Merge(a, b); err != nil {
		t.Errorf("merge within the bound: %v", err)
	}
}

// TestDeclaredLengthsAllocateNothing: lengths and counts declared far
// beyond the bytes present are refused before anything is sized by them.
func TestDeclaredLengthsAllocateNothing(t *testing.T) {
	huge := uint64(1<<53 - 1)
	inputs := [][]byte{
		enc(huge),          // clients
		enc(1, huge, 1, 0), // structs
		enc(1, 1, 1, 0, strRoot, 1, huge),
		enc(1, 1, 1, 0, byte(refAny), 1, "t", huge),
		enc(1, 1, 1, 0, byte(refAny), 1, "t", 1, byte(anyArray), huge),
		enc(1, 1, 1, 0, byte(refAny), 1, "t", 1, byte(anyObject), huge),
		enc(1, 1, 1, 0, byte(refBinary), 1, "t", huge),
		enc(0, huge),       // delete set clients
		enc(0, 1, 1, huge), // deleted ranges
	}
	var m Merger
	for _, in := range inputs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			if _, err := m.MergeUpdates(in); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%x: err %v", in, err)
			}
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / 100; per > 4096 {
			t.Errorf("%x: %d bytes allocated a call", in, per)
		}
	}
}

func TestCursorSplitsPairs(t *testing.T) {
	t.Parallel()
	c := cursor{ref: refString, b: []byte("a😀b")}
	if got := c.take(2, true); string(got) != "a\uFFFD" {
		t.Errorf("first take %q", got)
	}
	if got := c.take(2, true); string(got) != "\uFFFDb" {
		t.Errorf("second take %q", got)
	}
	c = cursor{ref: refString, b: []byte("😀😀")}
	c.take(1, false)
	if got := c.take(3, true); string(got) != "\uFFFD😀" {
		t.Errorf("take after a split %q", got)
	}
}

func utf16Decode(u []uint16) []rune {
	var out []rune
	for i := 0; i < len(u); i++ {
		r := rune(u[i])
		if r >= 0xd800 && r < 0xdc00 && i+1 < len(u) && u[i+1] >= 0xdc00 && u[i+1] < 0xe000 {
			r = (r-0xd800)<<10 + rune(u[i+1]-0xdc00) + 0x10000
			i++
		} else if r >= 0xd800 && r < 0xe000 {
			r = 0xfffd
		}
		out = append(out, r)
	}
	return out
}
