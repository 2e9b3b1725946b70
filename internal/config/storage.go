package config

import (
	"path/filepath"
	"strings"
	"time"
)

// Segments are the settings of the segment store (zero keeps the
// library's default; limits.segment_ttl is the segments' lifetime).
type Segments struct {
	// ForgetAfter is how long an expired segment is kept (its download
	// answers sync.segment_expired) before it is deleted.
	ForgetAfter time.Duration `yaml:"forget_after"`
	// SweepInterval is how often expired segments are deleted; negative
	// disables it.
	SweepInterval time.Duration `yaml:"sweep_interval"`
}

// SignedURLs configures signed segment and blob URLs; they are off
// without a key file.
type SignedURLs struct {
	// KeyFile holds the signing key (at least 16 bytes, surrounding white
	// space aside); every process of a fleet needs the same.
	KeyFile string `yaml:"key_file"`
	// PreviousKeyFile holds a key being rotated out, accepted until
	// PreviousKeyUntil (RFC 3339).
	PreviousKeyFile  string `yaml:"previous_key_file"`
	PreviousKeyUntil string `yaml:"previous_key_until"`
	// PublicURL is the URL clients reach the protocol routes at (the
	// mount), under which URLs are minted; empty: http://<listen><mount>.
	PublicURL string `yaml:"public_url"`
	// TTL is a URL's lifetime (default 15m, the spec's upper bound).
	TTL time.Duration `yaml:"ttl"`
}

// Blobs configures the blob store.
type Blobs struct {
	// Store is "db" (the database; the default), "fs:<directory>" or
	// "none".
	Store string `yaml:"store"`
	// MaxBytes caps a blob (default 64 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// Grace is how long a blob no row references is kept (default 24h).
	Grace time.Duration `yaml:"grace"`
	// SweepInterval is how often unreferenced blobs are deleted; negative
	// disables it.
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// Presign makes downloads and upload grants answer signed URLs on the
	// server itself (needs signed_urls.key_file).
	Presign bool `yaml:"presign"`
}

// storageRelativeTo makes the storage settings' relative paths relative
// to dir.
func (c *Config) storageRelativeTo(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	abs(&c.SignedURLs.KeyFile)
	abs(&c.SignedURLs.PreviousKeyFile)
	if d, ok := strings.CutPrefix(c.Blobs.Store, "fs:"); ok && d != "" && !filepath.IsAbs(d) {
		c.Blobs.Store = "fs:" + filepath.Join(dir, d)
	}
}
