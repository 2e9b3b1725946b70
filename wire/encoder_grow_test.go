package wire

import (
	"bytes"
	"io"
	"testing"
)

// An encoder told the size of what follows allocates its buffer once at
// that size: a 30-commit response (~5 KiB) ends in a buffer of about its
// size, where without Grow it jumps to a write-out's 36 KiB. The message
// is the same either way, and a message past a write-out still writes
// out.
func TestEncoderGrow(t *testing.T) {
	m := benchResponse(30)
	want, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	encode := func(grow int) ([]byte, int) {
		var out bytes.Buffer
		e, err := NewEncoder(&out, KindResponse, Version3)
		if err != nil {
			t.Fatal(err)
		}
		peak := 0
		for i, f := range m.Frames {
			if i == 2 && grow > 0 {
				e.Grow(grow)
			}
			if err := e.Encode(f); err != nil {
				t.Fatal(err)
			}
			peak = max(peak, cap(e.w.b))
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes(), peak
	}
	plain, plainCap := encode(0)
	sized, sizedCap := encode(len(want))
	if !bytes.Equal(plain, want) || !bytes.Equal(sized, want) {
		t.Fatal("the encoded message differs from MarshalBinary's")
	}
	if plainCap < encoderBufBytes {
		t.Errorf("without Grow the buffer reached %d bytes; the test assumes the jump to %d", plainCap, encoderBufBytes)
	}
	if sizedCap > 2*len(want) {
		t.Errorf("with Grow(%d) the buffer reached %d bytes, want about the message's size", len(want), sizedCap)
	}

	// A Grow beyond a write-out is capped at one, and the write-outs
	// still happen.
	big := benchResponse(1000)
	e, err := NewEncoder(io.Discard, KindResponse, Version3)
	if err != nil {
		t.Fatal(err)
	}
	e.Grow(1 << 20)
	if c := cap(e.w.b); c > 2*encoderBufBytes {
		t.Errorf("Grow(1 MiB) made a buffer of %d bytes, want at most a write-out's", c)
	}
	for _, f := range big.Frames {
		if err := e.Encode(f); err != nil {
			t.Fatal(err)
		}
		if len(e.w.b) > encoderBufBytes {
			t.Fatalf("the encoder holds %d bytes, past a write-out", len(e.w.b))
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
