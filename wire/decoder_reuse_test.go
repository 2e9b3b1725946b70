package wire

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestDecoderReuse: a stream decoded with DecoderOptions.Reuse yields,
// frame by frame, what a decoder without it yields, through COMMIT frames
// whose tables, changes and scopes grow and shrink (reused slices must
// carry nothing over: a delete after an upsert has no row version and no
// row), and the reused COMMIT is one value.
func TestDecoderReuse(t *testing.T) {
	row := []byte{0x00, 'x', 0x00, 'y'}
	m := &Message{Version: Version3, Kind: KindResponse}
	m.Frames = append(m.Frames, &RespHeader{LogEpoch: "e1"},
		&SubStart{ID: "s", Status: SubActive, EffectiveScopes: ScopeMap{{Key: "project", Values: []string{"p1"}}}})
	m.Frames = append(m.Frames,
		&Commit{CommitSeq: 1, CreatedAtMs: 10, ActorID: "a1", Tables: []string{"tasks", "labels"}, Changes: []Change{
			{TableIndex: 0, RowID: "r1", Op: OpUpsert, RowVersion: 3, Scopes: StoredScopes{{Key: "owner", Value: "o"}, {Key: "project", Value: "p1"}}, Row: row},
			{TableIndex: 1, RowID: "r2", Op: OpUpsert, RowVersion: 4, Scopes: StoredScopes{{Key: "project", Value: "p1"}}, Row: row[:2]},
			{TableIndex: 0, RowID: "r3", Op: OpDelete, Scopes: StoredScopes{}},
		}},
		&Commit{CommitSeq: 2, CreatedAtMs: 11, ActorID: "actor-two", Tables: []string{"tasks"}, Changes: []Change{
			{TableIndex: 0, RowID: "r4", Op: OpDelete, Scopes: StoredScopes{{Key: "project", Value: "p1"}}},
		}},
		&Commit{CommitSeq: 3, CreatedAtMs: 12, ActorID: "a1", Tables: []string{"tasks", "labels", "notes"}, Changes: []Change{
			{TableIndex: 2, RowID: "r5", Op: OpUpsert, RowVersion: 1, Scopes: StoredScopes{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "c", Value: "3"}}, Row: row},
			{TableIndex: 0, RowID: "r6", Op: OpDelete, Scopes: StoredScopes{{Key: "project", Value: "p1"}}},
		}},
		&Commit{CommitSeq: 4, CreatedAtMs: 13, ActorID: "a1", Tables: []string{}, Changes: []Change{}},
		&SubEnd{NextCursor: 4})
	bin, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	plain := NewDecoder(bytes.NewReader(bin), DecoderOptions{Kind: KindResponse})
	reused := NewDecoder(bytes.NewReader(bin), DecoderOptions{Kind: KindResponse, Reuse: true})
	var first *Commit
	frames := 0
	for {
		want, werr := plain.Next()
		got, gerr := reused.Next()
		if werr != gerr {
			t.Fatalf("frame %d: errors %v and %v", frames, werr, gerr)
		}
		if werr == io.EOF {
			break
		}
		if werr != nil {
			t.Fatal(werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("frame %d: reused decoding\n%#v\nwant\n%#v", frames, got, want)
		}
		if c, ok := got.(*Commit); ok {
			if first == nil {
				first = c
			} else if c != first {
				t.Errorf("frame %d: a new Commit with Reuse", frames)
			}
		}
		frames++
	}
	if frames != len(m.Frames) {
		t.Fatalf("%d frames decoded, want %d", frames, len(m.Frames))
	}
}

// TestDecoderReuseTruncated: with Reuse, a frame that declares more bytes
// than arrive is still a truncation error, after a smaller frame filled
// the reused buffer.
func TestDecoderReuseTruncated(t *testing.T) {
	bin, err := benchResponse(3).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cut := bin[:len(bin)-40]
	d := NewDecoder(bytes.NewReader(cut), DecoderOptions{Kind: KindResponse, Reuse: true})
	for {
		_, err := d.Next()
		if err == nil {
			continue
		}
		if ErrorCode(err) == "" || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("want a truncation decode error, got %v", err)
		}
		return
	}
}
