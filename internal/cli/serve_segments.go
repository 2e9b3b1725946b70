package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/blobfs"
	"github.com/syncgo/syncgo/blobs3"
	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/store"
)

// bindSegmentFlags declares the flags of the segment store, signed URL
// and blob settings (config sections segments, signed_urls, blobs); the
// returned function applies those given on the command line over c.
func bindSegmentFlags(fs *flag.FlagSet) func(c *config.Config) {
	var (
		forget, segSweep, urlTTL, grace, blobSweep time.Duration
		keyFile, prevKeyFile, prevUntil, publicURL string
		blobStore                                  string
		maxBytes                                   int64
		presign                                    bool
	)
	fs.DurationVar(&forget, "segment-forget-after", 0, "how long an expired segment is kept (answering sync.segment_expired) before it is deleted; default 1h (segments.forget_after)")
	fs.DurationVar(&segSweep, "segment-sweep-interval", 0, "how often expired segments are deleted; default 5m, negative disables (segments.sweep_interval)")
	fs.StringVar(&keyFile, "signing-key-file", "", "file holding the key that signs segment and blob URLs (at least 16 bytes; every process of a fleet needs the same); "+
		"without it no signed URLs are issued (signed_urls.key_file)")
	fs.StringVar(&prevKeyFile, "previous-signing-key-file", "", "file holding a key being rotated out, accepted until -previous-signing-key-until (signed_urls.previous_key_file)")
	fs.StringVar(&prevUntil, "previous-signing-key-until", "", "RFC 3339 time until which the previous signing key is accepted (signed_urls.previous_key_until)")
	fs.StringVar(&publicURL, "public-url", "", "URL clients reach the protocol routes at (the mount), under which signed URLs are minted; default http://<listen><mount> (signed_urls.public_url)")
	fs.DurationVar(&urlTTL, "signed-url-ttl", 0, "lifetime of a signed URL; default 15m, the spec's upper bound (signed_urls.ttl)")
	fs.StringVar(&blobStore, "blob-store", "", `where uploaded blobs live: "db" (the database; default), "fs:<directory>", "s3://<bucket>[/<prefix>]" (with the blobs.s3 settings) or "none" (blobs.store)`)
	fs.Int64Var(&maxBytes, "blob-max-bytes", 0, "largest blob accepted; default 64 MiB (blobs.max_bytes)")
	fs.DurationVar(&grace, "blob-grace", 0, "how long a blob no row references is kept before it is deleted; default 24h (blobs.grace)")
	fs.DurationVar(&blobSweep, "blob-sweep-interval", 0, "how often unreferenced blobs are deleted; default 1h, negative disables (blobs.sweep_interval)")
	fs.BoolVar(&presign, "blob-presign", false, "blob downloads and upload grants answer signed URLs on this server; needs -signing-key-file (blobs.presign)")
	return func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "segment-forget-after":
				c.Segments.ForgetAfter = forget
			case "segment-sweep-interval":
				c.Segments.SweepInterval = segSweep
			case "signing-key-file":
				c.SignedURLs.KeyFile = keyFile
			case "previous-signing-key-file":
				c.SignedURLs.PreviousKeyFile = prevKeyFile
			case "previous-signing-key-until":
				c.SignedURLs.PreviousKeyUntil = prevUntil
			case "public-url":
				c.SignedURLs.PublicURL = publicURL
			case "signed-url-ttl":
				c.SignedURLs.TTL = urlTTL
			case "blob-store":
				c.Blobs.Store = blobStore
			case "blob-max-bytes":
				c.Blobs.MaxBytes = maxBytes
			case "blob-grace":
				c.Blobs.Grace = grace
			case "blob-sweep-interval":
				c.Blobs.SweepInterval = blobSweep
			case "blob-presign":
				c.Blobs.Presign = presign
			}
		})
	}
}

// readKey reads a signing key file; surrounding white space (a trailing
// newline) is not part of the key.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) < 16 {
		return nil, fmt.Errorf("signing key %s: %d bytes, want at least 16", path, len(b))
	}
	return b, nil
}

// readSigningKeys reads the signing key and, when one is named, the
// previous key of the signed URL settings (serve, and config check, which
// reads them as serve does).
func readSigningKeys(su config.SignedURLs) (key, previous []byte, err error) {
	if key, err = readKey(su.KeyFile); err != nil {
		return nil, nil, fmt.Errorf("signed_urls.key_file: %w", err)
	}
	if su.PreviousKeyFile != "" {
		if previous, err = readKey(su.PreviousKeyFile); err != nil {
			return nil, nil, fmt.Errorf("signed_urls.previous_key_file: %w", err)
		}
	}
	return key, previous, nil
}

// openS3Blobs opens the object store of an s3:// blobs.store and checks
// that its bucket is reachable.
func openS3Blobs(b config.Blobs) (*blobs3.Store, error) {
	loc, err := b.S3Location()
	if err != nil {
		return nil, err
	}
	secret, err := b.S3Secret()
	if err != nil {
		return nil, err
	}
	bs, err := blobs3.Open(blobs3.Options{Endpoint: loc.Endpoint, Insecure: loc.Insecure, Region: b.S3.Region,
		AccessKey: b.S3.AccessKeyID, SecretKey: secret, PathStyle: b.S3.PathStyle, Bucket: loc.Bucket, Prefix: loc.Prefix})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := bs.Check(ctx); err != nil {
		return nil, fmt.Errorf("blobs.store %s: %w", b.Store, err)
	}
	return bs, nil
}

// applySegmentConfig sets the segment store, signed URL and blob settings
// of c on sc; addr and mount make the default public URL.
func applySegmentConfig(sc *syncgo.Config, c config.Config, addr net.Addr, mount string) error {
	sc.Limits.SegmentForgetAfter = c.Segments.ForgetAfter
	sc.SegmentSweepInterval = c.Segments.SweepInterval
	sc.Limits.MaxBlobBytes = c.Blobs.MaxBytes
	sc.Limits.BlobGracePeriod = c.Blobs.Grace
	sc.BlobSweepInterval = c.Blobs.SweepInterval
	switch store := c.Blobs.Store; {
	case store == "db" || store == "":
	case store == "none":
		sc.DisableBlobs = true
	case strings.HasPrefix(store, "fs:") && len(store) > 3:
		fs, err := blobfs.Open(strings.TrimPrefix(store, "fs:"))
		if err != nil {
			return err
		}
		sc.Blobs = fs
	case c.Blobs.IsS3():
		bs, err := openS3Blobs(c.Blobs)
		if err != nil {
			return err
		}
		sc.Blobs = bs
		sc.BlobStorePresignTTL = c.Blobs.S3.PresignTTL
	default:
		return fmt.Errorf(`blobs.store %q: want "db", "fs:<directory>", "s3://<bucket>[/<prefix>]" or "none"`, store)
	}
	switch st := c.Segments.Store; {
	case st == "db" || st == "":
	case strings.HasPrefix(st, "s3://"):
		idx, ok := sc.Store.(store.SegmentStorer)
		if !ok {
			return fmt.Errorf("segments.store %s needs a database driver with a segment store", st)
		}
		objs, err := openS3Blobs(config.Blobs{Store: st, S3: c.Blobs.S3})
		if err != nil {
			return fmt.Errorf("segments.store: %w", err)
		}
		sc.Segments = &blobs3.Segments{Index: idx.SegmentStore(), Objects: objs}
		sc.SegmentStorePresignTTL = c.Blobs.S3.PresignTTL
		if sc.SegmentStorePresignTTL <= 0 {
			sc.SegmentStorePresignTTL = 15 * time.Minute
		}
	default:
		return fmt.Errorf(`segments.store %q: want "db" or "s3://<bucket>[/<prefix>]" (with the blobs.s3 settings)`, st)
	}
	su := c.SignedURLs
	if su.KeyFile == "" {
		if c.Blobs.Presign {
			return errors.New("blobs.presign needs signed_urls.key_file")
		}
		return nil
	}
	key, previous, err := readSigningKeys(su)
	if err != nil {
		return err
	}
	out := &syncgo.SignedURLConfig{Key: key, PreviousKey: previous, BaseURL: su.PublicURL, TTL: su.TTL}
	if out.BaseURL == "" {
		out.BaseURL = "http://" + addr.String() + strings.TrimSuffix("/"+strings.Trim(mount, "/"), "/")
	}
	if previous != nil {
		if out.PreviousKeyUntil, err = time.Parse(time.RFC3339, su.PreviousKeyUntil); err != nil {
			return fmt.Errorf("signed_urls.previous_key_until %q: %w", su.PreviousKeyUntil, err)
		}
	}
	sc.SignedURLs = out
	sc.BlobPresign = c.Blobs.Presign
	return nil
}

// s3Summary checks an s3:// blob store's settings and secret file without
// contacting it, and describes it (never the secret).
func s3Summary(b config.Blobs) (string, error) {
	loc, err := b.S3Location()
	if err != nil {
		return "", err
	}
	if _, err := b.S3Secret(); err != nil {
		return "", err
	}
	scheme := "https"
	if loc.Insecure {
		scheme = "http"
	}
	creds := "anonymous"
	if b.S3.AccessKeyID != "" {
		creds = "access key " + b.S3.AccessKeyID
	}
	line := fmt.Sprintf("blobs in S3 bucket %q, prefix %q at %s://%s (%s; bucket not contacted by check)",
		loc.Bucket, loc.Prefix, scheme, loc.Endpoint, creds)
	if b.S3.PathStyle {
		line += ", path-style"
	}
	if b.S3.PresignTTL > 0 {
		line += fmt.Sprintf(", presigned downloads valid %s", b.S3.PresignTTL)
	}
	return line, nil
}
