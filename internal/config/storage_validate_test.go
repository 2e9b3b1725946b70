package config

import (
	"strings"
	"testing"
	"time"
)

// Storage and signed URL settings that serve refuses (or would serve
// against §5.4) fail Validate naming the setting, so that config check
// refuses them too instead of answering OK.
func TestStorageSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Blobs.Store = "bogus" }, "blobs.store"},
		{func(c *Config) { c.Blobs.Store = "fs:" }, "blobs.store"},
		{func(c *Config) { c.Segments.Store = "fs:/tmp/x" }, "segments.store"},
		{func(c *Config) { c.Blobs.Presign = true }, "blobs.presign needs signed_urls.key_file"},
		{func(c *Config) { c.SignedURLs.KeyFile = "k"; c.SignedURLs.PreviousKeyFile = "p" }, "signed_urls.previous_key_until"},
		{func(c *Config) {
			c.SignedURLs.KeyFile, c.SignedURLs.PreviousKeyFile, c.SignedURLs.PreviousKeyUntil = "k", "p", "tomorrow"
		}, "signed_urls.previous_key_until"},
		{func(c *Config) { c.SignedURLs.TTL = time.Hour }, "signed_urls.ttl"},
		{func(c *Config) { c.SignedURLs.TTL = -time.Second }, "signed_urls.ttl"},
		{func(c *Config) { c.SignedURLs.PublicURL = "sync.example.com/api" }, "signed_urls.public_url"},
	} {
		c := Default()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error naming %s", err, tc.want)
		}
	}
	c := Default()
	c.Blobs.Store, c.Segments.Store, c.Blobs.Presign = "fs:/var/lib/syncgo/blobs", "db", true
	c.SignedURLs = SignedURLs{KeyFile: "k", PreviousKeyFile: "p", PreviousKeyUntil: "2026-12-07T00:00:00Z",
		PublicURL: "https://sync.example.com/api", TTL: 15 * time.Minute}
	if err := c.Validate(); err != nil {
		t.Errorf("valid storage settings: %v", err)
	}
}

// A mount the HTTP mux cannot route (a brace, a space: serve panicked
// registering it) or that requests cannot reach is refused; the usual
// ones pass.
func TestMount(t *testing.T) {
	for _, m := range []string{"/", "", "/api/sync", "api/sync/", "/v1.0/sync", "/a-b_c~d"} {
		c := Default()
		c.Mount = m
		if err := c.Validate(); err != nil {
			t.Errorf("mount %q: %v", m, err)
		}
	}
	for _, m := range []string{"/a{b", "/{x}", "/api v2", "/a//b", "/a/../b", "/api?x=1", "/a#b", "/%2e"} {
		c := Default()
		c.Mount = m
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "mount") {
			t.Errorf("mount %q: Validate = %v, want an error naming mount", m, err)
		}
	}
}
