package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

// The main listener's ErrorLog: a handler's panic is an ERROR record, a
// client's failed handshake a WARN one, each with net/http's message.
func TestHTTPErrorLogLevels(t *testing.T) {
	var buf bytes.Buffer
	l := httpErrorLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.Printf("http: panic serving 127.0.0.1:1: boom\ngoroutine 1 [running]:")
	l.Printf("http: TLS handshake error from 127.0.0.1:2: EOF")
	dec := json.NewDecoder(&buf)
	for _, want := range []struct{ level, msg string }{
		{"ERROR", "http: panic serving 127.0.0.1:1: boom\ngoroutine 1 [running]:"},
		{"WARN", "http: TLS handshake error from 127.0.0.1:2: EOF"},
	} {
		var rec struct{ Level, Msg string }
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec.Level != want.level || rec.Msg != want.msg {
			t.Errorf("record %+v, want %s %q", rec, want.level, want.msg)
		}
	}
}
