// Command medians reads `go test -bench` output on stdin and prints, per
// benchmark and custom metric, the median, minimum and maximum over the runs
// (-count), as a Markdown table.
//
//	go test -p 1 -run '^$' -bench . -count 5 ./... | tee bench.txt
//	go run ./cmd/medians < bench.txt
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var procSuffix = regexp.MustCompile(`-\d+$`)

func main() {
	type key struct{ name, unit string }
	values := map[key][]float64{}
	var order []key
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		// f[1] is the iteration count; then value/unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			unit := f[i+1]
			if unit == "ns/op" || unit == "B/op" || unit == "allocs/op" {
				continue
			}
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := key{name, unit}
			if _, ok := values[k]; !ok {
				order = append(order, k)
			}
			values[k] = append(values[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("| benchmark | metric | median | min | max | runs |")
	fmt.Println("|---|---|---:|---:|---:|---:|")
	for _, k := range order {
		v := slices.Clone(values[k])
		slices.Sort(v)
		var med float64
		if n := len(v); n%2 == 1 {
			med = v[n/2]
		} else {
			med = (v[n/2-1] + v[n/2]) / 2
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %d |\n", k.name, k.unit,
			format(med), format(v[0]), format(v[len(v)-1]), len(v))
	}
}

func format(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
