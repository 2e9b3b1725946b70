package wire

import "testing"

func TestCompareKeys(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"a", "b", -1},
		{"a", "a", 0},
		{"ab", "a", 1},
		{"", "a", -1},
		// In UTF-8 bytes U+1F600 sorts after U+FF5E; in UTF-16 it starts
		// with the surrogate 0xD83D, which sorts before 0xFF5E.
		{"\U0001F600", "\uFF5E", -1},
		{"\uE000", "\U00010000", 1},
		{"\U00010000", "\U00010001", -1},
		{"z", "\u00e9", -1},
	}
	for _, tt := range tests {
		if got := CompareKeys(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareKeys(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := CompareKeys(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareKeys(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestScopeMapOrder(t *testing.T) {
	// Byte order would put U+FF5E first; UTF-16 order puts the emoji first.
	m := ScopeMap{{Key: "\U0001F600"}, {Key: "\uFF5E"}}
	var w writer
	appendScopeMap(&w, "m", m)
	if w.err != nil {
		t.Fatalf("canonical order refused: %v", w.err)
	}
	r := newReader(w.b)
	decodeScopeMap(r, "m")
	if r.err != nil {
		t.Fatalf("canonical order rejected: %v", r.err)
	}
	var w2 writer
	appendScopeMap(&w2, "m", ScopeMap{m[1], m[0]})
	if w2.err == nil {
		t.Fatal("byte order accepted")
	}
	r2 := newReader(w2.b)
	decodeScopeMap(r2, "m")
	if r2.err == nil {
		t.Fatal("decoder accepted keys out of UTF-16 order")
	}
	var w3 writer
	appendScopeMap(&w3, "m", ScopeMap{{Key: "a"}, {Key: "a"}})
	r3 := newReader(w3.b)
	decodeScopeMap(r3, "m")
	if r3.err == nil {
		t.Fatal("decoder accepted a duplicate key")
	}
}
