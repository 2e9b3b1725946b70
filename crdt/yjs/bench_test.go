package yjs

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkMerge folds sets of updates with Merge, as the server merges
// pushes one after the other; MB/s is of the input bytes.
//
//	go test ./crdt/yjs -run '^$' -bench Merge -benchmem
//
// "fixtures" are the 300 equivalence cases (2-6 small pushes each); the
// long-text corpora come from tools/yjs-equivalence (check.mjs
// --bench-corpus), which times Yjs's own merges on the same inputs.
func BenchmarkMerge(b *testing.B) {
	var fixtures [][][]byte
	for _, fx := range loadFixtures(b) {
		fixtures = append(fixtures, fx.Inputs)
	}
	corpora := []struct {
		name string
		sets [][][]byte
	}{{"fixtures", fixtures}}
	f, err := os.Open("testdata/bench.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var c struct {
			Name string
			Sets [][][]byte
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			b.Fatal(err)
		}
		corpora = append(corpora, struct {
			name string
			sets [][][]byte
		}{c.Name, c.Sets})
	}
	// Hostile: 20,000 clients of one struct each, twice over.
	many := enc(20000)
	for i := range 20000 {
		many = append(many, enc(1, 1+i, i%7, byte(0), 1)...)
	}
	many = append(many, 0)
	corpora = append(corpora, struct {
		name string
		sets [][][]byte
	}{"20000 clients of one GC", [][][]byte{{many, many}}})

	var m Merger
	for _, c := range corpora {
		n := 0
		for _, s := range c.sets {
			for _, u := range s {
				n += len(u)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range c.sets {
					var stored []byte
					for _, u := range s {
						if stored, err = m.Merge(stored, u); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}
