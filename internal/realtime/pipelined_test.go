package realtime

import "testing"

// binaryFrameIn finds the start of a binary message behind other client
// frames, and nothing in text, control or cut frames.
func TestBinaryFrameIn(t *testing.T) {
	masked := func(op byte, n int) []byte {
		b := []byte{0x80 | op, 0x80 | byte(n), 1, 2, 3, 4}
		return append(b, make([]byte, n)...)
	}
	long := []byte{0x81, 0x80 | 126, 0x01, 0x00, 1, 2, 3, 4}
	long = append(long, make([]byte, 256)...)
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"empty", nil, false},
		{"binary", masked(0x2, 3), true},
		{"text", masked(0x1, 20), false},
		{"ping then binary", append(masked(0x9, 0), masked(0x2, 5)...), true},
		{"ack then binary", append(masked(0x1, 40), masked(0x2, 1)...), true},
		{"long text then binary", append(long, masked(0x2, 1)...), true},
		{"cut text", masked(0x1, 40)[:10], false},
		{"text then cut header", append(masked(0x1, 2), 0x80), false},
		{"pong and close", append(masked(0xA, 0), masked(0x8, 2)...), false},
	} {
		if got := binaryFrameIn(tc.b); got != tc.want {
			t.Errorf("%s: binaryFrameIn = %t, want %t", tc.name, got, tc.want)
		}
	}
}
