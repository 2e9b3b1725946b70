package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// The rate limits and socket caps load from the file with the environment over it (a
// float rate from the environment included), and negative ones fail
// Validate.
func TestRateLimitSettings(t *testing.T) {
	path := writeFile(t, `
limits:
  rate_per_actor: 5
  rate_per_actor_burst: 10
  rate_global: 100
realtime:
  max_sockets: 1000
`)
	c, err := Load(path, env(map[string]string{
		"SYNCGO_LIMITS_RATE_PER_ACTOR":          "2.5",
		"SYNCGO_LIMITS_RATE_GLOBAL_BURST":       "50",
		"SYNCGO_REALTIME_MAX_SOCKETS_PER_ACTOR": "4",
	}))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	if l.RatePerActor != 2.5 || l.RatePerActorBurst != 10 || l.RateGlobal != 100 || l.RateGlobalBurst != 50 {
		t.Fatalf("loaded %+v", l)
	}
	if c.Realtime.MaxSockets != 1000 || c.Realtime.MaxSocketsPerActor != 4 {
		t.Fatalf("loaded %+v", c.Realtime)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, env(map[string]string{"SYNCGO_LIMITS_RATE_GLOBAL": "fast"})); err == nil ||
		!strings.Contains(err.Error(), "SYNCGO_LIMITS_RATE_GLOBAL") {
		t.Fatalf("a malformed rate: %v", err)
	}
	c.Realtime.MaxSockets = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_sockets") {
		t.Fatalf("a negative socket cap: %v", err)
	}
	c.Realtime.MaxSockets = 0
	c.Limits.RateGlobal = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "rate_global") {
		t.Fatalf("a negative rate: %v", err)
	}
}

// The TLS files load from the environment, are made relative to the
// config file's directory, and one without the other fails Validate.
func TestTLSSettings(t *testing.T) {
	path := writeFile(t, "tls_cert_file: cert.pem\n")
	c, err := Load(path, env(map[string]string{"SYNCGO_TLS_KEY_FILE": "/etc/syncgo/key.pem"}))
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(c.TLSCertFile) || filepath.Base(c.TLSCertFile) != "cert.pem" || c.TLSKeyFile != "/etc/syncgo/key.pem" {
		t.Fatalf("loaded %q %q", c.TLSCertFile, c.TLSKeyFile)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.TLSKeyFile = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tls_key_file") {
		t.Fatalf("a certificate without a key: %v", err)
	}
}
