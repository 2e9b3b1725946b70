package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzParseScopesHeader: the X-Syncular-Scopes parser refuses with
// sync.invalid_request, agrees with encoding/json on what it accepts, and
// the canonical rendering of what it accepts parses back to the same
// canonical rendering (so the same digest).
func FuzzParseScopesHeader(f *testing.F) {
	for _, s := range []string{`{"project":["p1"]}`, ` { "b" : [ "y", "x", "x" ], "a":[] } `, `{}`,
		`{"a":["1"],"a":["2"]}`, "{\"p\":[\"caf\xe9\"]}", `{"a":[null]}`, `{"a":null}`, `{"a":[]} x`,
		`{"\ud800":["\udfff","\u0000"]}`, `{"A":["1"],"a":["2"]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		got, err := ParseScopesHeader(header)
		if err != nil {
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("error %v without the protocol code", err)
			}
			return
		}
		b := []byte(header)
		if !utf8.Valid(b) {
			b = latin1ToUTF8(b)
		}
		var want map[string][]string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", header, err)
		}
		if len(got) != len(want) {
			t.Fatalf("parsed %q as %v; encoding/json reads %v", header, got, want)
		}
		for k, vs := range want {
			if g, ok := got[k]; !ok || !reflect.DeepEqual(g, append([]string{}, vs...)) {
				t.Fatalf("parsed %q as %v; encoding/json reads %v", header, got, want)
			}
		}
		canon := CanonicalScopeJSON(got)
		again, err := ParseScopesHeader(string(canon))
		if err != nil {
			t.Fatalf("the canonical rendering %s does not parse: %v", canon, err)
		}
		if c2 := CanonicalScopeJSON(again); !bytes.Equal(c2, canon) {
			t.Fatalf("canonical rendering not stable: %s, then %s", canon, c2)
		}
	})
}

// FuzzRejectionDetails: ValidateRejectionDetails accepts only objects of
// §6.3.1's four members spelled exactly, none null, and whatever it
// accepts re-marshals (as validate.Reject marshals Details) to an object
// it accepts with the same content.
func FuzzRejectionDetails(f *testing.F) {
	for _, s := range []string{`{"reason":"row.locked"}`, `{"fieldPaths":["a.b","c"],"requiredAction":"refresh-row"}`,
		`{"references":{"row.id":"r 1"}}`, `{"reason":null}`, `{}`, `{"reason":"a","x":1}`, `{"Reason":"a"}`,
		`{"reason":"a","reason":"b"}`, `{"fieldPaths":["a","a"]}`, `[]`, `null`} {
		f.Add(s)
	}
	known := map[string]bool{"fieldPaths": true, "reason": true, "requiredAction": true, "references": true}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateRejectionDetails(s) != nil {
			return
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", s, err)
		}
		for k := range raw {
			if !known[k] {
				t.Fatalf("accepted %q, which has the member %q", s, k)
			}
		}
		var d RejectionDetails
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateRejectionDetails(string(b)); err != nil {
			t.Fatalf("accepted %q; its re-marshalling %s is refused: %v", s, b, err)
		}
		var back RejectionDetails
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, d) {
			t.Fatalf("round trip %s: %+v, want %+v", b, back, d)
		}
	})
}

// trickleReader hands out at most step bytes a read and records the
// largest buffer it was offered beyond the bytes it had given.
type trickleReader struct {
	data  []byte
	step  int
	given int
	// worst is the largest given+len(p) seen in a Read: the size of the
	// reader's buffer when it asked.
	worst int
}

func (r *trickleReader) Read(p []byte) (int, error) {
	r.worst = max(r.worst, r.given+len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.data)
	r.data = r.data[n:]
	r.given += n
	return n, nil
}

// FuzzReadGrowing: ReadGrowing returns exactly the declared bytes when
// they arrive, io.EOF or io.ErrUnexpectedEOF when they do not, and its
// buffer never outgrows twice the bytes received (or the first chunk),
// whatever length is declared.
func FuzzReadGrowing(f *testing.F) {
	f.Add([]byte("hello"), uint32(5), uint16(1))
	f.Add([]byte("hello"), uint32(1<<30), uint16(2))
	f.Add(bytes.Repeat([]byte{7}, 3*readChunk), uint32(3*readChunk-1), uint16(40000))
	f.Add([]byte{}, uint32(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, declared uint32, step uint16) {
		n := int(declared % (1 << 26))
		r := &trickleReader{data: data, step: int(step) + 1}
		p, err := ReadGrowing(r, n)
		if n > readChunk && r.worst > max(readChunk, 2*r.given) {
			t.Fatalf("declared %d, received %d: a buffer of %d bytes", n, r.given, r.worst)
		}
		if len(data) >= n {
			if err != nil || !bytes.Equal(p, data[:n]) || cap(p) != n {
				t.Fatalf("declared %d of %d bytes: %d bytes (cap %d), %v", n, len(data), len(p), cap(p), err)
			}
			return
		}
		want := io.ErrUnexpectedEOF
		if len(data) == 0 {
			want = io.EOF
		}
		if !errors.Is(err, want) || p != nil {
			t.Fatalf("declared %d of %d bytes: %d bytes, %v; want %v", n, len(data), len(p), err, want)
		}
	})
}

// TestRejectionDetailsMemberCase: a member spelled in another case is an
// unknown member, not the known one (encoding/json would fill the field
// and the checks of the exact name would not run).
func TestRejectionDetailsMemberCase(t *testing.T) {
	for _, s := range []string{`{"Reason":"a"}`, `{"REASON":"Not A Token\u0000"}`,
		`{"reason":"a","References":{"k":"\u0001"}}`, `{"fieldpaths":["1 2"]}`} {
		if ValidateRejectionDetails(s) == nil {
			t.Errorf("accepted %s", s)
		}
	}
}
