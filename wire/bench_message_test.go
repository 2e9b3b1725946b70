package wire

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// benchResponse builds a pull response of n COMMIT frames, each with one
// upsert change of a ~120-byte row, the shape of an incremental catch-up.
func benchResponse(n int) *Message {
	epoch := "epoch-1"
	m := &Message{Version: Version3, Kind: KindResponse}
	m.Frames = append(m.Frames,
		&RespHeader{LogEpoch: epoch},
		&SubStart{ID: "sub-tasks", Status: SubActive, EffectiveScopes: ScopeMap{{Key: "project", Values: []string{"p1"}}}},
	)
	row := bytes.Repeat([]byte{0x00, 'x'}, 60)
	for i := 0; i < n; i++ {
		m.Frames = append(m.Frames, &Commit{
			CommitSeq:   int64(i + 1),
			CreatedAtMs: 1782993600000 + int64(i),
			ActorID:     "actor-1",
			Tables:      []string{"tasks"},
			Changes: []Change{{
				TableIndex: 0,
				RowID:      fmt.Sprintf("task-%06d", i),
				Op:         OpUpsert,
				RowVersion: 1,
				Scopes:     StoredScopes{{Key: "project", Value: "p1"}},
				Row:        row,
			}},
		})
	}
	m.Frames = append(m.Frames, &SubEnd{NextCursor: int64(n)})
	return m
}

func BenchmarkResponseEncode1000Commits(b *testing.B) {
	m := benchResponse(1000)
	bin, err := m.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	for b.Loop() {
		e, _ := NewEncoder(io.Discard, KindResponse, Version3)
		for _, f := range m.Frames {
			if err := e.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResponseDecode1000Commits(b *testing.B) {
	benchDecodeResponse(b, func(bin []byte) *Decoder { return NewBytesDecoder(bin, DecoderOptions{Kind: KindResponse}) })
}

func BenchmarkResponseStreamDecode1000Commits(b *testing.B) {
	benchDecodeResponse(b, func(bin []byte) *Decoder {
		return NewDecoder(bytes.NewReader(bin), DecoderOptions{Kind: KindResponse})
	})
}

// BenchmarkResponseStreamDecodeReuse1000Commits is
// BenchmarkResponseStreamDecode1000Commits with DecoderOptions.Reuse (as
// the bench tool reads a catch-up).
func BenchmarkResponseStreamDecodeReuse1000Commits(b *testing.B) {
	benchDecodeResponse(b, func(bin []byte) *Decoder {
		return NewDecoder(bytes.NewReader(bin), DecoderOptions{Kind: KindResponse, Reuse: true})
	})
}

// benchDecodeResponse decodes a 1,000-commit response to its end with the
// decoder open makes, once per iteration.
func benchDecodeResponse(b *testing.B, open func(bin []byte) *Decoder) {
	bin, err := benchResponse(1000).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	for b.Loop() {
		d := open(bin)
		for {
			_, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
