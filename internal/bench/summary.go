package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// A Set is the results of several runs against one server setup (a
// directory of -json files, labelled for the table's column).
type Set struct {
	Label   string
	Results []Result
}

// LoadSet reads every *.json result in dir.
func LoadSet(label, dir string) (Set, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return Set{}, err
	}
	s := Set{Label: label}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return Set{}, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return Set{}, fmt.Errorf("%s: %w", f, err)
		}
		if r.Workload == "" {
			continue // not a result
		}
		s.Results = append(s.Results, r)
	}
	if len(s.Results) == 0 {
		return Set{}, fmt.Errorf("%s: no results", dir)
	}
	return s, nil
}

// Variant names a result's workload with the parameters that change what
// is measured (rounds or push-only, the sizes), so that only runs of the
// same variant are taken together.
func (r *Result) Variant() string {
	v := r.Workload
	param := func(k string) string {
		x, ok := r.Params[k]
		if !ok {
			return ""
		}
		return fmt.Sprint(x)
	}
	switch r.Workload {
	case "push":
		if param("round") == "true" {
			v = "push+pull rounds"
		}
		v += ", " + param("clients") + " clients"
	case "catchup":
		v += ", " + param("commits") + " commits"
	case "bootstrap":
		v += ", " + param("rows") + " rows"
		if param("sqlite") == "true" {
			v += ", sqlite images"
		}
	case "fanout":
		v += ", " + param("sockets") + " sockets, " + param("commits") + " commits"
	case "memory":
		v += ", " + param("sockets") + " sockets"
	case "reconnect":
		v += ", " + param("clients") + " clients"
	}
	return v
}

// Median is the median of xs (the mean of the middle two for an even
// count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// WriteSummary writes a Markdown table of medians: one row per variant
// and figure, one column per set, each cell the median over the set's
// runs of that variant with the number of runs, and the errors summed.
func WriteSummary(w io.Writer, sets []Set) error {
	type key struct{ variant, figure string }
	var order []key
	seen := map[key]bool{}
	units := map[key]string{}
	values := make([]map[key][]float64, len(sets))
	runs := make([]map[string]int, len(sets))
	errs := make([]map[string]int64, len(sets))
	var variants []string
	for i, s := range sets {
		values[i], runs[i], errs[i] = map[key][]float64{}, map[string]int{}, map[string]int64{}
		for _, r := range s.Results {
			v := r.Variant()
			if !slices.Contains(variants, v) {
				variants = append(variants, v)
			}
			runs[i][v]++
			errs[i][v] += r.Errors
			for _, f := range r.Figures {
				k := key{v, f.Name}
				if !seen[k] {
					seen[k] = true
					order = append(order, k)
					units[k] = f.Unit
				}
				values[i][k] = append(values[i][k], f.Value)
			}
		}
	}
	sort.SliceStable(variants, func(a, b int) bool { return variants[a] < variants[b] })
	var b strings.Builder
	b.WriteString("| workload | figure |")
	for _, s := range sets {
		fmt.Fprintf(&b, " %s |", s.Label)
	}
	b.WriteString("\n|---|---|")
	for range sets {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, v := range variants {
		first := true
		for _, k := range order {
			if k.variant != v {
				continue
			}
			name := ""
			if first {
				name = v
			}
			first = false
			fig := k.figure
			if u := units[k]; u != "" {
				fig += " (" + u + ")"
			}
			fmt.Fprintf(&b, "| %s | %s |", name, fig)
			for i := range sets {
				xs := values[i][k]
				if len(xs) == 0 {
					b.WriteString(" |")
					continue
				}
				fmt.Fprintf(&b, " %s |", formatValue(Median(xs)))
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "| | runs, errors |")
		for i := range sets {
			if runs[i][v] == 0 {
				b.WriteString(" |")
				continue
			}
			fmt.Fprintf(&b, " %d, %d |", runs[i][v], errs[i][v])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
