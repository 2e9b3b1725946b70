package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// A frame that declares a large length and then stalls (here: ends) must
// cost the bytes that arrived, not the declared length.
func TestDecoderDoesNotAllocateDeclaredLength(t *testing.T) {
	msg := []byte("SSP2\x03\x00\x01\x00")
	msg = append(msg, byte(FramePushCommit))
	msg = binary.LittleEndian.AppendUint32(msg, 16<<20-1)
	msg = append(msg, make([]byte, 1000)...)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const runs = 8
	for range runs {
		d := NewDecoder(io.MultiReader(bytes.NewReader(msg)), DecoderOptions{Kind: KindRequest})
		_, err := d.Next()
		if err == nil || ErrorCode(err) == "" {
			t.Fatalf("want a truncation decode error, got %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	if perRun > 1<<20 {
		t.Fatalf("a stalled 16 MiB frame allocated %d bytes per decode; want well under the declared length", perRun)
	}
}

func TestReadGrowing(t *testing.T) {
	src := make([]byte, 300<<10+7)
	for i := range src {
		src[i] = byte(i * 7)
	}
	got, err := ReadGrowing(io.MultiReader(bytes.NewReader(src)), len(src))
	if err != nil || !bytes.Equal(got, src) || cap(got) != len(src) {
		t.Fatalf("ReadGrowing: err %v, equal %v, cap %d", err, bytes.Equal(got, src), cap(got))
	}
	if _, err := ReadGrowing(bytes.NewReader(src[:100<<10]), len(src)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short input: %v", err)
	}
	if _, err := ReadGrowing(bytes.NewReader(nil), len(src)); !errors.Is(err, io.EOF) {
		t.Fatalf("empty input: %v", err)
	}
}
