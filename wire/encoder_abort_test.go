package wire

import (
	"errors"
	"fmt"
	"testing"
)

// refusingWriter takes the first n writes, then refuses without writing.
type refusingWriter struct {
	out  []byte
	take int
}

func (w *refusingWriter) Write(p []byte) (int, error) {
	if w.take == 0 {
		return 0, fmt.Errorf("gate: %w", ErrNotWritten)
	}
	w.take--
	w.out = append(w.out, p...)
	return len(p), nil
}

// A destination that refuses a flush without taking its bytes leaves the
// message whole: Abort (even after a failed Close) ends it with ERROR and
// END, and the frames of the refused flush never appear.
func TestEncoderAbortAfterRefusedWrite(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		w := &refusingWriter{take: 1}
		e, err := NewEncoder(w, KindResponse, Version3)
		if err != nil {
			t.Fatal(err)
		}
		epoch := "e"
		if err := e.Encode(&RespHeader{LogEpoch: epoch}); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := e.Encode(&SubStart{ID: "s", Status: SubActive}); err != nil {
			t.Fatal(err)
		}
		if err := e.Encode(&SubEnd{NextCursor: 1}); err != nil {
			t.Fatal(err)
		}
		var ferr error
		if closeFirst {
			ferr = e.Close()
		} else {
			ferr = e.Flush()
		}
		if !errors.Is(ferr, ErrNotWritten) {
			t.Fatalf("flush = %v, want ErrNotWritten", ferr)
		}
		w.take = 1
		if err := e.Abort(&ErrorFrame{Code: "sync.schema_not_ready", Message: "m", Category: "retryable", RecommendedAction: "retry"}); err != nil {
			t.Fatalf("Abort after a refused write (close first %v): %v", closeFirst, err)
		}
		m, err := DecodeMessage(w.out, DecoderOptions{Kind: KindResponse})
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(m.Frames) != 2 {
			t.Fatalf("frames %v, want RESP_HEADER and ERROR", m.Frames)
		}
		if _, ok := m.Frames[1].(*ErrorFrame); !ok {
			t.Fatalf("second frame %T, want ERROR", m.Frames[1])
		}
	}
}
