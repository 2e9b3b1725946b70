package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSummaryMedians(t *testing.T) {
	dir := t.TempDir()
	write := func(sub, name string, r Result) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteJSON(filepath.Join(dir, sub, name)); err != nil {
			t.Fatal(err)
		}
	}
	push := func(rate float64, round bool, errs int64) Result {
		return Result{Workload: "push", Params: map[string]any{"clients": 64, "round": round},
			Figures: []Figure{{Name: "commits/s", Value: rate, Unit: "1/s"}}, Errors: errs}
	}
	write("a", "1.json", push(100, false, 0))
	write("a", "2.json", push(300, false, 1))
	write("a", "3.json", push(200, false, 0))
	write("a", "4.json", push(50, true, 0))
	write("b", "1.json", push(10, false, 0))
	write("b", "2.json", push(20, false, 0))
	if err := os.WriteFile(filepath.Join(dir, "b", "notes.json"), []byte(`{"other":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := LoadSet("syncgo", filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadSet("reference", filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteSummary(&out, []Set{a, b}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"| workload | figure | syncgo | reference |",
		"| push, 64 clients | commits/s (1/s) | 200 | 15 |",
		"| | runs, errors | 3, 1 | 2, 0 |",
		"| push+pull rounds, 64 clients | commits/s (1/s) | 50 | |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if _, err := LoadSet("empty", t.TempDir()); err == nil {
		t.Error("an empty directory loaded as a set")
	}
}
