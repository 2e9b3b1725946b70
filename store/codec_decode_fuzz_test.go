package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzDecodePushRecord: a stored push record read back either is
// ErrUnreadable or encodes to a record that decodes to the same value,
// and whose encoding is then stable (the record a retried push answers is
// the one first recorded).
func FuzzDecodePushRecord(f *testing.F) {
	for _, s := range []string{
		`{"status":"applied","commitSeq":7,"recordedAtMs":1,"cacheIdentity":"e","actorId":"a","results":[{"opIndex":0,"status":"applied"}]}`,
		`{"status":"rejected","results":[{"opIndex":0,"status":"error","code":"x","message":"no","retryable":false,"details":{"reason":"a"}}]}`,
		`{"status":"applied","commitSeq":3,"results":[{"opIndex":1,"status":"conflict","code":"c","serverVersion":2,"serverRow":"AQI=","conflictColumns":"AA=="}]}`,
		`{"status":"cached","commitSeq":1,"results":[]}`,
		`{"status":"applied","results":[]}`,
		`{"status":"rejected","results":[{"opIndex":0,"status":"error","details":{"Reason":"a"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodePushRecord(b)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("error %v is not ErrUnreadable", err)
			}
			return
		}
		enc, err := EncodePushRecord(rec)
		if err != nil {
			t.Fatalf("a decoded record %+v does not encode: %v", rec, err)
		}
		again, err := DecodePushRecord(enc)
		if err != nil {
			t.Fatalf("record %q encodes to %s, which does not decode: %v", b, enc, err)
		}
		// encoding/json escapes <, > and & in the details it re-marshals:
		// the same JSON, other bytes. Compare the details as JSON.
		if !reflect.DeepEqual(detailsAsJSON(t, again), detailsAsJSON(t, rec)) {
			t.Fatalf("record %q through %s: details %v, want %v", b, enc, again.Details, rec.Details)
		}
		a, r := again, rec
		a.Details, r.Details = nil, nil
		if !reflect.DeepEqual(a, r) {
			t.Fatalf("record %q through %s:\n got %+v\nwant %+v", b, enc, again, rec)
		}
		if enc2, err := EncodePushRecord(again); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding not stable: %s, then %s (%v)", enc, enc2, err)
		}
	})
}

func detailsAsJSON(t *testing.T, rec PushRecord) []any {
	var out []any
	for _, d := range rec.Details {
		var v any
		if err := json.Unmarshal([]byte(d.DetailsJSON), &v); err != nil {
			t.Fatalf("details %q are not JSON: %v", d.DetailsJSON, err)
		}
		out = append(out, d.OpIndex, v)
	}
	return out
}

// FuzzDecodeSegmentBody: a stored zstd segment body decodes, as the
// streaming decoder reads it, to exactly what zstd's whole-buffer decoder
// gives when that is the stored length; anything else is refused (and so
// may a frame whose window is over the memory bound of the length).
func FuzzDecodeSegmentBody(f *testing.F) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		f.Fatal(err)
	}
	for _, plain := range [][]byte{nil, []byte("segment"), bytes.Repeat([]byte("abc"), 700)} {
		frame := enc.EncodeAll(plain, nil)
		f.Add(frame, uint16(len(plain)))
		f.Add(frame, uint16(len(plain)+1))
		f.Add(append(frame, frame...), uint16(2*len(plain)))
	}
	_ = enc.Close()
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<24))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, body []byte, length uint16) {
		plainLength := int64(length)
		got, err := DecodeSegmentBody(SegmentBodyZstd, body, plainLength)
		want, werr := dec.DecodeAll(body, nil)
		ok := werr == nil && int64(len(want)) == plainLength
		if err == nil && !ok {
			t.Fatalf("decoded %d bytes of a body zstd reads as %d bytes, %v (stored length %d)", len(got), len(want), werr, plainLength)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatal("the streaming and whole-buffer decoders disagree")
		}
		// The streaming decoder's memory is bounded by the stored length:
		// a frame declaring a larger window is refused, whatever it holds.
		bounded := errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded)
		if err != nil && ok && !bounded {
			t.Fatalf("refused a body zstd reads as its %d stored bytes: %v", plainLength, err)
		}
	})
}

// TestDecodeSegmentBodyCutTail: bytes past a complete frame that are the
// start of a cut frame, or bytes that are not a frame at all, damage the
// body even when the stored length is reached. (Reading one byte past the
// length took the decoder's io.ErrUnexpectedEOF for the end: "0" with a
// stored length of 0 read as an empty body.)
func TestDecodeSegmentBodyCutTail(t *testing.T) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	frame := enc.EncodeAll([]byte("segment"), nil)
	if got, err := DecodeSegmentBody(SegmentBodyZstd, frame, 7); err != nil || string(got) != "segment" {
		t.Fatalf("a whole frame: %q, %v", got, err)
	}
	for name, body := range map[string][]byte{
		"cut second frame": append(append([]byte{}, frame...), frame[:6]...),
		"garbage":          []byte("0"),
	} {
		n := int64(7)
		if name == "garbage" {
			n = 0
		}
		if got, err := DecodeSegmentBody(SegmentBodyZstd, body, n); err == nil {
			t.Errorf("%s: decoded %q", name, got)
		}
	}
}
