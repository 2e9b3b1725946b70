// Command gomerge is the Go side of the Yjs equivalence tool
// (tools/yjs-equivalence): it reads merge requests as JSON lines on stdin
// and answers each with a JSON line on stdout, merging with package
// crdt/yjs exactly as the server does (a fold of Merge(stored, incoming)
// over the inputs in each requested order).
//
// A request is {"id": N, "inputs": [base64...], "orders": [[i...]...]};
// the answer is {"id": N, "results": [base64 per order], "multi": base64
// (MergeUpdates of every input at once), "idempotent": bool (merging any
// input, or the result itself, into the result changes no byte),
// "error": "..."}. With "bench": K the answer instead carries "benchNs":
// the median time of one fold over the inputs in the first order, over K
// runs, and "benchBytes": the bytes of the inputs.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/syncgo/syncgo/crdt/yjs"
)

type request struct {
	ID     int      `json:"id"`
	Inputs [][]byte `json:"inputs"`
	Orders [][]int  `json:"orders"`
	Bench  int      `json:"bench"`
}

type answer struct {
	ID         int      `json:"id"`
	Results    [][]byte `json:"results,omitempty"`
	Multi      []byte   `json:"multi,omitempty"`
	Idempotent bool     `json:"idempotent"`
	Error      string   `json:"error,omitempty"`
	BenchNs    int64    `json:"benchNs,omitempty"`
	BenchBytes int      `json:"benchBytes,omitempty"`
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	dec := json.NewDecoder(in)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if err.Error() != "EOF" {
				fmt.Fprintln(os.Stderr, "gomerge:", err)
				os.Exit(1)
			}
			return
		}
		if err := enc.Encode(serve(&req)); err != nil {
			fmt.Fprintln(os.Stderr, "gomerge:", err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
}

func fold(m yjs.Merger, inputs [][]byte, order []int) ([]byte, error) {
	var stored []byte
	for _, i := range order {
		merged, err := m.Merge(stored, inputs[i])
		if err != nil {
			return nil, err
		}
		stored = merged
	}
	if stored == nil {
		return m.Merge(nil, nil)
	}
	return stored, nil
}

func serve(req *request) answer {
	var m yjs.Merger
	a := answer{ID: req.ID}
	if req.Bench > 0 {
		n := 0
		for _, in := range req.Inputs {
			n += len(in)
		}
		times := make([]int64, 0, req.Bench)
		for range req.Bench {
			t := time.Now()
			if _, err := fold(m, req.Inputs, req.Orders[0]); err != nil {
				a.Error = err.Error()
				return a
			}
			times = append(times, time.Since(t).Nanoseconds())
		}
		slices.Sort(times)
		a.BenchNs, a.BenchBytes = times[len(times)/2], n
		return a
	}
	for _, order := range req.Orders {
		r, err := fold(m, req.Inputs, order)
		if err != nil {
			a.Error = err.Error()
			return a
		}
		a.Results = append(a.Results, r)
	}
	multi, err := m.MergeUpdates(req.Inputs...)
	if err != nil {
		a.Error = "MergeUpdates: " + err.Error()
		return a
	}
	a.Multi = multi
	if len(a.Results) == 0 {
		return a
	}
	a.Idempotent = true
	res := a.Results[0]
	for _, in := range append(slices.Clone(req.Inputs), res) {
		again, err := m.Merge(res, in)
		if err != nil || !bytes.Equal(again, res) {
			a.Idempotent = false
		}
	}
	return a
}
