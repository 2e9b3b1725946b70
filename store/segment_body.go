package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// SegmentBodyZstd is the content coding of segment bodies kept by a
// SegmentBodyStore: a zstd frame of the segment's bytes, the body a
// download negotiated to zstd serves as it is.
const SegmentBodyZstd = "zstd"

// DecodeSegmentBody returns the segment's bytes of a body in the coding
// enc, which must decode to exactly plainLength bytes (the stored length:
// a longer or shorter frame is a damaged body, refused without decoding
// past the length).
func DecodeSegmentBody(enc string, body []byte, plainLength int64) ([]byte, error) {
	switch enc {
	case "":
		return body, nil
	case SegmentBodyZstd:
	default:
		return nil, fmt.Errorf("segment body: unknown content coding %q", enc)
	}
	if plainLength < 0 || plainLength > 1<<31 {
		return nil, fmt.Errorf("segment body: implausible length %d", plainLength)
	}
	d, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(plainLength)+1<<20))
	if err != nil {
		return nil, fmt.Errorf("segment body: %w", err)
	}
	defer d.Close()
	out := make([]byte, plainLength)
	if n, err := io.ReadFull(d, out); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("segment body: %d bytes decoded, %d stored", n, plainLength)
		}
		return nil, fmt.Errorf("segment body: %w", err)
	}
	// The frame must end cleanly right there: io.EOF, not more bytes and
	// not a cut frame (which the decoder reports as io.ErrUnexpectedEOF,
	// and which reading one byte past the length could not tell from the
	// end).
	var probe [1]byte
	for range 100 {
		n, err := d.Read(probe[:])
		switch {
		case n > 0:
			return nil, fmt.Errorf("segment body: more than the %d bytes stored", plainLength)
		case err == io.EOF:
			return out, nil
		case err != nil:
			return nil, fmt.Errorf("segment body: %w", err)
		}
	}
	return nil, fmt.Errorf("segment body: %w", io.ErrNoProgress)
}
