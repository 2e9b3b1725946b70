package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
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
	// Store is "db" (the database; the default) or
	// "s3://<bucket>[/<prefix>]": the segments' bytes are also written to
	// that S3-compatible object store (reached with the blobs.s3
	// settings), and clients that accept URLs fetch them from it by
	// presigned URL (valid blobs.s3.presign_ttl, default 15m).
	Store string `yaml:"store"`
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
	// Store is "db" (the database; the default), "fs:<directory>",
	// "s3://<bucket>[/<prefix>]" (an S3-compatible object store, set up
	// by S3) or "none".
	Store string `yaml:"store"`
	// S3 is the object store of an s3:// Store.
	S3 BlobS3 `yaml:"s3"`
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

// BlobS3 configures the S3-compatible object store of blobs.store
// s3://bucket/prefix.
type BlobS3 struct {
	// Endpoint is the object store's URL, "https://host[:port]" (or
	// "http://" for a local server); a bare host means https. Required.
	Endpoint string `yaml:"endpoint"`
	// Region is the bucket's region; empty: discovered by the client.
	Region string `yaml:"region"`
	// AccessKeyID and the secret access key (SecretAccessKey, better
	// given by SecretAccessKeyFile or the environment) authenticate;
	// none at all means anonymous requests.
	AccessKeyID         string `yaml:"access_key_id"`
	SecretAccessKey     string `yaml:"secret_access_key"`
	SecretAccessKeyFile string `yaml:"secret_access_key_file"`
	// PathStyle addresses the bucket in the URL path instead of the host
	// name (MinIO, Ceph, most self-hosted servers need it).
	PathStyle bool `yaml:"path_style"`
	// PresignTTL, when positive, makes blob downloads answer the object
	// store's presigned GET URL, valid this long (at most 15m), instead
	// of streaming the bytes through the server.
	PresignTTL time.Duration `yaml:"presign_ttl"`
}

// BlobS3Location is the bucket and key prefix of an s3:// blob store.
type BlobS3Location struct {
	Bucket, Prefix string
	// Endpoint is the host[:port] and Insecure whether it is plain HTTP.
	Endpoint string
	Insecure bool
}

// IsS3 reports whether the blob store is an S3-compatible object store.
func (b Blobs) IsS3() bool { return strings.HasPrefix(b.Store, "s3://") }

// S3Location checks the settings of an s3:// blob store and returns
// where it is (not the secret, which S3Secret reads).
func (b Blobs) S3Location() (BlobS3Location, error) {
	rest, ok := strings.CutPrefix(b.Store, "s3://")
	if !ok {
		return BlobS3Location{}, fmt.Errorf("blobs.store %q is not s3://<bucket>[/<prefix>]", b.Store)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !validBucket(bucket) {
		return BlobS3Location{}, fmt.Errorf("blobs.store %q: %q is not an S3 bucket name (3 to 63 of a-z 0-9 . -)", b.Store, bucket)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	loc := BlobS3Location{Bucket: bucket, Prefix: prefix}
	ep := b.S3.Endpoint
	switch {
	case ep == "":
		return BlobS3Location{}, errors.New("blobs.s3.endpoint is required with an s3:// blobs.store")
	case strings.Contains(ep, "://"):
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" ||
			u.RawQuery != "" || u.User != nil {
			return BlobS3Location{}, fmt.Errorf("blobs.s3.endpoint %q: want http(s)://host[:port] and nothing more", RedactURL(ep))
		}
		loc.Endpoint, loc.Insecure = u.Host, u.Scheme == "http"
	default:
		if strings.ContainsAny(ep, "/?@ ") {
			return BlobS3Location{}, fmt.Errorf("blobs.s3.endpoint %q: want http(s)://host[:port]", RedactURL(ep))
		}
		loc.Endpoint = ep
	}
	s3 := b.S3
	if s3.SecretAccessKey != "" && s3.SecretAccessKeyFile != "" {
		return BlobS3Location{}, errors.New("blobs.s3: set secret_access_key or secret_access_key_file, not both")
	}
	hasSecret := s3.SecretAccessKey != "" || s3.SecretAccessKeyFile != ""
	if (s3.AccessKeyID == "") != !hasSecret {
		return BlobS3Location{}, errors.New("blobs.s3: access_key_id and a secret access key go together")
	}
	if s3.PresignTTL < 0 || s3.PresignTTL > 15*time.Minute {
		return BlobS3Location{}, fmt.Errorf("blobs.s3.presign_ttl %s: want 0 (off) up to 15m", s3.PresignTTL)
	}
	return loc, nil
}

// S3Secret returns the secret access key of an s3:// blob store, read
// from its file when one is named.
func (b Blobs) S3Secret() (string, error) {
	if f := b.S3.SecretAccessKeyFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("blobs.s3.secret_access_key_file: %w", err)
		}
		k := strings.TrimSpace(string(data))
		if k == "" {
			return "", errors.New("blobs.s3.secret_access_key_file is empty")
		}
		return k, nil
	}
	return b.S3.SecretAccessKey, nil
}

// validBucket reports whether name is an S3 bucket name.
func validBucket(name string) bool {
	if len(name) < 3 || len(name) > 63 || name[0] == '.' || name[0] == '-' || name[len(name)-1] == '.' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// MaxSignedURLTTL is the longest lifetime of a signed URL (§5.4).
const MaxSignedURLTTL = 15 * time.Minute

// validateStorage checks the forms of the segment store, blob store and
// signed URL settings, as serve reads them, without reading files or
// contacting a store: so that config check refuses what serve would.
func (c Config) validateStorage() error {
	var errs []error
	switch st := c.Blobs.Store; {
	case st == "" || st == "db" || st == "none" || c.Blobs.IsS3():
	case strings.HasPrefix(st, "fs:") && len(st) > len("fs:"):
	default:
		errs = append(errs, fmt.Errorf(`blobs.store %q: want "db", "fs:<directory>", "s3://<bucket>[/<prefix>]" or "none"`, st))
	}
	if st := c.Segments.Store; st != "" && st != "db" && !strings.HasPrefix(st, "s3://") {
		errs = append(errs, fmt.Errorf(`segments.store %q: want "db" or "s3://<bucket>[/<prefix>]" (with the blobs.s3 settings)`, st))
	}
	su := c.SignedURLs
	if c.Blobs.Presign && su.KeyFile == "" {
		errs = append(errs, errors.New("blobs.presign needs signed_urls.key_file"))
	}
	if su.PreviousKeyFile != "" {
		if _, err := time.Parse(time.RFC3339, su.PreviousKeyUntil); err != nil {
			errs = append(errs, fmt.Errorf("signed_urls.previous_key_until %q: want an RFC 3339 time (with previous_key_file)", su.PreviousKeyUntil))
		}
	}
	if su.TTL < 0 || su.TTL > MaxSignedURLTTL {
		errs = append(errs, fmt.Errorf("signed_urls.ttl %s: want 0 (the default, 15m) up to 15m (§5.4)", su.TTL))
	}
	if p := su.PublicURL; p != "" {
		if u, err := url.Parse(p); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("signed_urls.public_url %q: want an absolute http(s) URL without query", RedactURL(p)))
		}
	}
	return errors.Join(errs...)
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
	abs(&c.Blobs.S3.SecretAccessKeyFile)
	if d, ok := strings.CutPrefix(c.Blobs.Store, "fs:"); ok && d != "" && !filepath.IsAbs(d) {
		c.Blobs.Store = "fs:" + filepath.Join(dir, d)
	}
}
