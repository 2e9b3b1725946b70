package bench

import (
	"bytes"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

func serverFrameBytes(t *testing.T, fin bool, op ws.OpCode, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := ws.WriteFrame(&b, ws.Frame{Header: ws.Header{Fin: fin, OpCode: op, Length: int64(len(payload))}, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestConsumeAtEveryCut: the poller's reader assembles the same messages
// whatever the reads' boundaries: heartbeats (7-bit and 16-bit lengths)
// and one message fragmented in three frames, the stream cut in two at
// every byte and fed one byte at a time.
func TestConsumeAtEveryCut(t *testing.T) {
	hb := []byte(`{"event":"heartbeat","data":{"timestamp":1}}`)
	long := []byte(`{"event":"heartbeat","data":{"timestamp":1` + string(bytes.Repeat([]byte(" "), 300)) + `}}`)
	var stream []byte
	stream = append(stream, serverFrameBytes(t, true, ws.OpText, hb)...)
	stream = append(stream, serverFrameBytes(t, true, ws.OpText, long)...)
	stream = append(stream, serverFrameBytes(t, false, ws.OpText, hb[:10])...)
	stream = append(stream, serverFrameBytes(t, false, ws.OpContinuation, hb[10:20])...)
	stream = append(stream, serverFrameBytes(t, true, ws.OpContinuation, hb[20:])...)
	const messages = 3
	feed := func(parts ...[]byte) *vsocket {
		s := &vsocket{}
		for _, p := range parts {
			if !s.consume(p, time.Now(), time.Time{}) {
				t.Fatalf("consume refused a valid stream cut as %d parts", len(parts))
			}
		}
		return s
	}
	for cut := range len(stream) + 1 {
		s := feed(stream[:cut], stream[cut:])
		if s.messages != messages || len(s.pending) != 0 || s.fragOp != 0 {
			t.Fatalf("cut at %d: %d messages, %d bytes pending, fragment op %v; want %d, 0, 0",
				cut, s.messages, len(s.pending), s.fragOp, messages)
		}
	}
	var bytewise [][]byte
	for i := range stream {
		bytewise = append(bytewise, stream[i:i+1])
	}
	if s := feed(bytewise...); s.messages != messages {
		t.Fatalf("byte by byte: %d messages, want %d", s.messages, messages)
	}
}

// TestConsumeRefuses: frames a server must not send end the connection.
func TestConsumeRefuses(t *testing.T) {
	masked := serverFrameBytes(t, true, ws.OpText, []byte("{}"))
	masked[1] |= 0x80
	rsv := serverFrameBytes(t, true, ws.OpText, []byte("{}"))
	rsv[0] |= 0x40
	tests := map[string][]byte{
		"masked":                masked,
		"reserved bit":          rsv,
		"fragmented ping":       serverFrameBytes(t, false, ws.OpPing, nil),
		"continuation alone":    serverFrameBytes(t, true, ws.OpContinuation, []byte("x")),
		"text inside a message": append(serverFrameBytes(t, false, ws.OpText, []byte("{")), serverFrameBytes(t, true, ws.OpText, []byte("}"))...),
		"unknown opcode":        serverFrameBytes(t, true, ws.OpCode(0x3), nil),
		"not an event":          serverFrameBytes(t, true, ws.OpText, []byte("{")),
		"empty binary":          serverFrameBytes(t, true, ws.OpBinary, nil),
		"unknown channel tag":   serverFrameBytes(t, true, ws.OpBinary, []byte{0x7f}),
		"over the bound":        {0x82, 127, 0, 0, 0, 0, 0x10, 0, 0, 0},
	}
	for name, b := range tests {
		s := &vsocket{}
		if s.consume(b, time.Now(), time.Time{}) {
			t.Errorf("%s: consumed, want refused", name)
		}
	}
}
