package wire

import (
	"bytes"
	"testing"
)

// sectionFrames encodes a response header and an empty section.
func sectionFrames(t *testing.T, e *Encoder, end bool) {
	t.Helper()
	v := int32(1)
	for _, f := range []Frame{&RespHeader{LatestSchemaVersion: &v, LogEpoch: "e"},
		&SubStart{ID: "s", Status: SubActive, EffectiveScopes: ScopeMap{{Key: "k", Values: []string{"v"}}}}} {
		if err := e.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	if end {
		if err := e.Encode(&SubEnd{NextCursor: 7}); err != nil {
			t.Fatal(err)
		}
	}
}

// Before anything is written, Pending is the message so far and Detach
// ends it as Close would, without writing: the bytes Close would have
// written, END included, and a closed encoder. After a write, neither
// gives anything and Close still ends the message.
func TestEncoderDetach(t *testing.T) {
	var closed bytes.Buffer
	ref, _ := NewEncoder(&closed, KindResponse, Version3)
	sectionFrames(t, ref, true)
	if err := ref.Close(); err != nil {
		t.Fatal(err)
	}

	var dst bytes.Buffer
	e, _ := NewEncoder(&dst, KindResponse, Version3)
	sectionFrames(t, e, true)
	pending, ok := e.Pending()
	if !ok || !bytes.Equal(pending, closed.Bytes()[:closed.Len()-5]) {
		t.Fatalf("Pending = %x, %v; want the message before END", pending, ok)
	}
	msg, ok, err := e.Detach()
	if err != nil || !ok || !bytes.Equal(msg, closed.Bytes()) {
		t.Fatalf("Detach = %x, %v, %v; want %x", msg, ok, err, closed.Bytes())
	}
	if dst.Len() != 0 {
		t.Fatalf("Detach wrote %d bytes", dst.Len())
	}
	if err := e.Encode(&SubEnd{}); err == nil {
		t.Fatal("Encode after Detach succeeded")
	}
	if _, ok := e.Pending(); ok {
		t.Fatal("Pending after Detach")
	}

	// A message out of grammar is not detached.
	g, _ := NewEncoder(&dst, KindResponse, Version3)
	sectionFrames(t, g, false)
	if _, ok, err := g.Detach(); err == nil || ok {
		t.Fatalf("Detach of a section without SUB_END = %v, %v; want a grammar error", ok, err)
	}

	// After a flush the encoder writes its message itself.
	var out bytes.Buffer
	f, _ := NewEncoder(&out, KindResponse, Version3)
	sectionFrames(t, f, true)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Pending(); ok {
		t.Fatal("Pending after a flush")
	}
	if msg, ok, err := f.Detach(); ok || err != nil || msg != nil {
		t.Fatalf("Detach after a flush = %x, %v, %v; want nothing", msg, ok, err)
	}
	if err := f.Close(); err != nil || !bytes.Equal(out.Bytes(), closed.Bytes()) {
		t.Fatalf("Close after a refused Detach: %v, %x; want %x", err, out.Bytes(), closed.Bytes())
	}
}
