package wire

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzParseRealtime feeds arbitrary text to both control-message parsers.
// Neither may panic; a failure must be a sync.invalid_request decode error;
// and whatever parses must encode to valid UTF-8 JSON that parses back to an
// equal value, through AppendJSON and MarshalJSON alike.
func FuzzParseRealtime(f *testing.F) {
	for _, s := range []string{
		helloJSON, joinJSON,
		`{"event":"sync","data":{"cursor":64,"requiresPull":true,"reason":"catchup-required","timestamp":1}}`,
		`{"event":"heartbeat","data":{"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"k","error":"presence.too_large","timestamp":1}}`,
		`{"event":"presence","data":{"scopeKey":"k","doc":{"a":[1,{"b":null}]}}}`,
		`{"type":"ack","cursor":5.0e0}`,
		`{"type":"ping","x":"\u2028"}`,
		`{"event":"future","data":[1,2]}`,
	} {
		f.Add([]byte(s))
	}
	if root := os.Getenv("SYNCGO_VECTORS_DIR"); root != "" {
		for _, set := range []string{"realtime", "v3/realtime"} {
			files, _ := filepath.Glob(filepath.Join(root, set, "*.json"))
			more, _ := filepath.Glob(filepath.Join(root, set, "invalid", "*.json"))
			for _, p := range append(files, more...) {
				if b, err := os.ReadFile(p); err == nil {
					f.Add(b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ev, err := ParseServerEvent(b); err != nil {
			checkFuzzError(t, err)
		} else {
			enc := AppendServerEvent(nil, ev)
			checkFuzzJSON(t, enc)
			again, err := ParseServerEvent(enc)
			if err != nil || !reflect.DeepEqual(again, ev) {
				t.Fatalf("server event round trip\n in: %q\nenc: %s\ngot: %#v, %v\nwant %#v", b, enc, again, err, ev)
			}
			if m, err := ev.MarshalJSON(); err != nil || string(m) != string(enc) {
				t.Fatalf("MarshalJSON = %s, %v; AppendJSON = %s", m, err, enc)
			}
		}
		if msg, err := ParseClientMessage(b); err != nil {
			checkFuzzError(t, err)
		} else {
			enc := AppendClientMessage(nil, msg)
			checkFuzzJSON(t, enc)
			again, err := ParseClientMessage(enc)
			if err != nil || !reflect.DeepEqual(again, msg) {
				t.Fatalf("client message round trip\n in: %q\nenc: %s\ngot: %#v, %v\nwant %#v", b, enc, again, err, msg)
			}
			if m, err := msg.MarshalJSON(); err != nil || string(m) != string(enc) {
				t.Fatalf("MarshalJSON = %s, %v; AppendJSON = %s", m, err, enc)
			}
		}
	})
}

func checkFuzzError(t *testing.T, err error) {
	t.Helper()
	if ErrorCode(err) != CodeInvalidRequest {
		t.Fatalf("error %v is not a %s decode error", err, CodeInvalidRequest)
	}
}

func checkFuzzJSON(t *testing.T, enc []byte) {
	t.Helper()
	if !utf8.Valid(enc) || !json.Valid(enc) {
		t.Fatalf("encoding is not valid UTF-8 JSON: %q", enc)
	}
}
