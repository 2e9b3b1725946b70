package sspclient

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestSizedReader: a small uncompressed response is read through a buffer
// of its own size; a compressed, large or unsized one is read as it is.
func TestSizedReader(t *testing.T) {
	body := strings.NewReader("x")
	for _, tc := range []struct {
		name     string
		encoding string
		length   int64
		want     int // the buffer's size; 0: the body itself
	}{
		{"push result", "", 180, 180},
		{"tiny", "", 3, 16}, // bufio's least size
		{"just under", "", smallBody - 1, smallBody - 1},
		{"large", "", smallBody, 0},
		{"compressed", "zstd", 180, 0},
		{"unsized", "", -1, 0},
	} {
		resp := &http.Response{Header: http.Header{}, ContentLength: tc.length}
		if tc.encoding != "" {
			resp.Header.Set("Content-Encoding", tc.encoding)
		}
		got := sizedReader(resp, body)
		br, buffered := got.(*bufio.Reader)
		switch {
		case tc.want == 0 && got != body:
			t.Errorf("%s: got a %T, want the body itself", tc.name, got)
		case tc.want != 0 && (!buffered || br.Size() != tc.want):
			t.Errorf("%s: got a %T (buffered %v), want a buffer of %d bytes", tc.name, got, buffered, tc.want)
		}
	}
}
