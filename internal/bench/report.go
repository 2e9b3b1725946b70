package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is the outcome of one run: its parameters and its figures, in
// the order the workload reported them.
type Result struct {
	Workload  string         `json:"workload"`
	URL       string         `json:"url"`
	Wire      uint16         `json:"wire"`
	Partition string         `json:"partition,omitempty"`
	Params    map[string]any `json:"params"`
	Figures   []Figure       `json:"figures"`
	// Errors counts the failed operations (requests, dials, deliveries
	// missing at the deadline); each workload says what it counts.
	Errors  int64     `json:"errors"`
	Started time.Time `json:"started"`
	Elapsed string    `json:"elapsed"`
}

// Figure is one measured value.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

func (r *Result) add(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit})
}

// addMs adds a duration figure in milliseconds.
func (r *Result) addMs(name string, d time.Duration) {
	r.add(name, float64(d.Microseconds())/1000, "ms")
}

// addLatency adds the p50, p99 and max of a latency summary.
func (r *Result) addLatency(name string, s Summary) {
	r.addMs(name+" p50", s.P50)
	r.addMs(name+" p99", s.P99)
	r.addMs(name+" max", s.Max)
}

// Figure returns a figure's value by name.
func (r *Result) Figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// WriteTable prints the result as a table: names left, values right.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s against %s, wire %d", r.Workload, r.URL, r.Wire)
	if r.Partition != "" {
		fmt.Fprintf(&b, ", partition %s", r.Partition)
	}
	fmt.Fprintf(&b, " (%s)\n", r.Elapsed)
	rows := append(slices.Clone(r.Figures), Figure{Name: "errors", Value: float64(r.Errors)})
	nameW, valW := 0, 0
	for _, f := range rows {
		nameW, valW = max(nameW, len(f.Name)), max(valW, len(formatValue(f.Value)))
	}
	for _, f := range rows {
		fmt.Fprintf(&b, "  %-*s  %*s %s\n", nameW, f.Name, valW, formatValue(f.Value), f.Unit)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the result as indented JSON to path.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// formatValue renders a figure: integers with thousands separators,
// others with three significant decimals at most.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return groupThousands(int64(v))
	}
	switch a := math.Abs(v); {
	case a >= 100:
		return groupThousands(int64(math.Round(v)))
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
