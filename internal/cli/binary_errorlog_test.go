package cli_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
)

// What net/http itself reports about the main listener's connections (a
// TLS handshake a client failed, a handler's panic) goes to the process
// log in its format and at a level: a client's failed handshake is a
// warning (a scanner speaking plain HTTP to the TLS port pages no one),
// and with -log-format json every line of standard error is a JSON
// record.
func TestBinaryHTTPServerErrorsInProcessLog(t *testing.T) {
	bin := binarytest.Build(t)
	_, schemaPath := exampleSchema(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile, 1)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "x.db"),
		"-schema", schemaPath, "-tls-cert", certFile, "-tls-key", keyFile, "-log-format", "json")
	// Plain HTTP to the TLS port: the handshake fails on the server.
	plain := "http" + strings.TrimPrefix(p.URL, "https") + "/readyz"
	resp, err := http.Get(plain)
	if err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Stderr.String(), "TLS handshake error") {
		if time.Now().After(deadline) {
			t.Fatalf("the failed handshake is not in the process log:\n%s", p.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(p.Stderr.String()), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a line of standard error is not a JSON record: %q", line)
			continue
		}
		if strings.Contains(rec.Msg, "TLS handshake error") && rec.Level != "WARN" {
			t.Errorf("a client's failed handshake logged at %s: %q", rec.Level, line)
		}
	}
}
