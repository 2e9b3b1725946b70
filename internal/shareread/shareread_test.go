package shareread

import (
	"errors"
	"testing"
)

// TestBatched: one ask is answered alone; several by one batched read,
// each its own answer in order, or the batched read's error for all.
func TestBatched(t *testing.T) {
	got := map[int]string{}
	reply := func(i int, r string, err error) {
		if err != nil {
			r = "error " + err.Error()
		}
		got[i] = r
	}
	alone := func(q string) (string, error) { return "alone " + q, nil }
	all := func(qs []string) ([]string, error) {
		out := make([]string, len(qs))
		for i, q := range qs {
			out[i] = "all " + q
		}
		return out, nil
	}
	if n := Batched([]string{"x"}, reply, alone, all); n != 0 || got[0] != "alone x" {
		t.Errorf("one ask: %d shared, %q", n, got[0])
	}
	if n := Batched([]string{"x", "y"}, reply, alone, all); n != 2 || got[0] != "all x" || got[1] != "all y" {
		t.Errorf("two asks: %d shared, %v", n, got)
	}
	fail := func([]string) ([]string, error) { return nil, errors.New("down") }
	if Batched([]string{"x", "y"}, reply, alone, fail); got[0] != "error down" || got[1] != "error down" {
		t.Errorf("a failed read: %v", got)
	}
}
