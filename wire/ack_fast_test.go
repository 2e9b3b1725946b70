package wire

import (
	"strconv"
	"testing"
)

func TestParseAckFast(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`{"type":"ack","cursor":0}`, 0, true},
		{`{"type":"ack","cursor":42}`, 42, true},
		{`{"cursor":42,"type":"ack"}`, 42, true},
		{`{"type":"ack","cursor":-1}`, -1, true},
		{`{"type":"ack","cursor":9007199254740991}`, MaxSafeInteger, true},
		{`{"type":"ack","cursor":-9007199254740991}`, -MaxSafeInteger, true},
		// Everything else goes to the full parser.
		{`{"type":"ack","cursor":9007199254740992}`, 0, false},
		{`{"type":"ack","cursor":99999999999999999999}`, 0, false},
		{`{"type":"ack","cursor":1.5}`, 0, false},
		{`{"type":"ack","cursor":1e3}`, 0, false},
		{`{"type":"ack","cursor":01}`, 0, false},
		{`{"type":"ack","cursor":-0}`, 0, false},
		{`{"type":"ack","cursor":-}`, 0, false},
		{`{"type":"ack","cursor":"5"}`, 0, false},
		{`{"type":"ack","cursor":5`, 0, false},
		{`{"type":"ack","cursor":5}x`, 0, false},
		{`{"type":"ack","cursor":5,"type":"x"}`, 0, false},
		{`{"type":"ack","cursor": 5}`, 0, false},
		{`{"cursor":5,"type":"ack"`, 0, false},
		{`{"cursor":5,"type":"nack"}`, 0, false},
		{`{"type":"ack"}`, 0, false},
		{``, 0, false},
	} {
		got, ok := ParseAckFast([]byte(c.in))
		if ok != c.ok || got != c.want {
			t.Errorf("ParseAckFast(%s) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseAckFast: the fast path accepts only what ParseClientMessage
// parses to the same ack, and every ack in the compact form clients send.
func FuzzParseAckFast(f *testing.F) {
	for _, s := range []string{`{"type":"ack","cursor":7}`, `{"cursor":7,"type":"ack"}`,
		`{"type":"ack","cursor":-9007199254740991}`, `{"type":"ack","cursor":1.0}`, `{"type":"ack","cursor":007}`,
		`{"cursor":1,"type":"ack","x":1}`, `{"event":"presence","data":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := ParseAckFast(b)
		m, err := ParseClientMessage(b)
		if ok {
			if a, isAck := m.(Ack); err != nil || !isAck || a.Cursor != n {
				t.Fatalf("ParseAckFast(%q) = %d; ParseClientMessage = %#v, %v", b, n, m, err)
			}
		}
		if a, isAck := m.(Ack); err == nil && isAck {
			for _, enc := range []string{string(a.AppendJSON(nil)), `{"cursor":` + strconv.FormatInt(a.Cursor, 10) + `,"type":"ack"}`} {
				if got, ok := ParseAckFast([]byte(enc)); !ok || got != a.Cursor {
					t.Fatalf("ParseAckFast(%s) = %d, %v; want %d", enc, got, ok, a.Cursor)
				}
			}
		}
	})
}
