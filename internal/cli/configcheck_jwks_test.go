package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config check names the JWKS URL it would fetch without the password of
// its user info (an identity provider behind basic authentication).
func TestConfigCheckHidesJWKSPassword(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "syncgo.yaml")
	cfg := "db: " + filepath.Join(dir, "x.db") + "\nauth:\n  mode: jwt\n" +
		"  jwks_url: \"https://svc:JWKS-PASSW0RD@idp.example.com/jwks.json\"\n" +
		"  issuer: \"https://idp.example.com\"\n  audience: [\"sync\"]\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := runConfig([]string{"check", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("config check exited %d: %s", code, stderr.String())
	}
	out := stdout.String() + stderr.String()
	if strings.Contains(out, "JWKS-PASSW0RD") {
		t.Fatalf("config check printed the JWKS password:\n%s", out)
	}
	if !strings.Contains(out, "idp.example.com/jwks.json") {
		t.Fatalf("config check does not name the JWKS URL:\n%s", out)
	}
}
