package yjs

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzMerge feeds arbitrary bytes to the decoder and the merge: no panic,
// only ErrMalformed or ErrTooLarge as errors, and a merged result is a
// well-formed update and a fixed point of the merge. (That merging an
// input again changes no byte holds for inputs that agree on the content
// of every clock, as updates Yjs wrote do; the fixture tests check it.
// Arbitrary bytes need not agree.)
//
//	go test ./crdt/yjs -run '^$' -fuzz FuzzMerge -fuzztime 60s
func FuzzMerge(f *testing.F) {
	fxs := loadFixtures(f)
	for i, fx := range fxs {
		if i%4 != 0 {
			continue
		}
		f.Add(fx.Inputs[0], fx.Inputs[len(fx.Inputs)-1])
	}
	f.Add([]byte{0, 0}, []byte{})
	f.Add(textUpdate(1, "a😀b"), enc(0, 1, 1, 1, 1))
	m := Merger{MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out, err := m.Merge(a, b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if err := Validate(out); err != nil {
			t.Fatalf("the merge wrote a malformed update: %v\n%x", err, out)
		}
		again, err := m.Merge(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("the merged value is not a fixed point (err %v)\n%x\n%x", err, out, again)
		}
		if twice, err := m.Merge(out, out); err != nil || !bytes.Equal(twice, out) {
			t.Fatalf("merging the result with itself changed it (err %v)\n%s\n%s", err, dump(out), dump(twice))
		}
	})
}
