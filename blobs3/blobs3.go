// Package blobs3 is a blob store (store.BlobStore, §5.9.2) in an
// S3-compatible object store, through github.com/minio/minio-go/v7.
//
// An upload streams to a temporary object (a multipart upload of bounded
// parts, never the whole blob in memory) and is copied to the blob's key
// only once the caller's reader reached EOF, that is once the bytes were
// verified; a reader error aborts the multipart upload, so nothing is
// stored. Several server processes may share a bucket and prefix.
//
// Layout under the prefix:
//
//	tmp/upload-<startedAtMs>-<random>        uploads in progress
//	b/<partition, base64url>/<64 hex>        a blob's bytes
//
// A blob's upload time (BlobInfo.CreatedAtMs) and advisory media type are
// kept in the object's user metadata; a re-upload of a stored blob copies
// the object onto itself with the new time.
//
// Limits: a blob is at most 5 GiB (a single server-side copy); DeleteBlob
// checks the upload time, then deletes, which S3 cannot do atomically, so
// a re-upload racing with the sweep of the same blob may be lost (the
// client uploads it again when it finds it missing).
package blobs3

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/syncgo/syncgo/store"
)

const (
	metaCreated = "Syncgo-Created-Ms"
	metaMedia   = "Syncgo-Media-Type"
	// partSize bounds the memory of one upload: minio-go buffers one part.
	partSize = 8 << 20
	// maxCopy is the largest object one CopyObject may copy; a larger
	// one is copied by a multipart copy.
	maxCopy = 5 << 30
)

// Options configures a Store.
type Options struct {
	// Endpoint is the object store's host[:port] (no scheme).
	Endpoint string
	// Insecure uses plain HTTP instead of HTTPS.
	Insecure bool
	// Region is the bucket's region; "" lets the client discover it.
	Region string
	// AccessKey and SecretKey are static credentials; both "" means
	// anonymous access.
	AccessKey, SecretKey string
	// PathStyle addresses the bucket in the path (endpoint/bucket/key)
	// instead of the host name; most non-AWS servers need it.
	PathStyle bool
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Prefix is prepended to every key ("" or ending in "/").
	Prefix string
	// Transport is the HTTP transport; nil uses the default.
	Transport http.RoundTripper
}

// Store is an S3 blob store. It is safe for concurrent use, also by
// several processes on one bucket and prefix.
type Store struct {
	c      *minio.Client
	bucket string
	prefix string
	// maxCopy is the size above which PutBlob copies in parts: the
	// constant maxCopy, lowered by tests to reach that path.
	maxCopy int64
}

var (
	_ store.BlobStore     = (*Store)(nil)
	_ store.BlobPresigner = (*Store)(nil)
)

// Open returns the store the options describe. It does not contact the
// server.
func Open(o Options) (*Store, error) {
	if o.Endpoint == "" || o.Bucket == "" {
		return nil, errors.New("blobs3: endpoint and bucket are required")
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	lookup := minio.BucketLookupDNS
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:       !o.Insecure,
		Region:       o.Region,
		BucketLookup: lookup,
		Transport:    o.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("blobs3: %w", err)
	}
	return &Store{c: c, bucket: o.Bucket, prefix: o.Prefix, maxCopy: maxCopy}, nil
}

// Check reports whether the bucket is reachable and exists.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("blobs3: bucket %q: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("blobs3: bucket %q does not exist", s.bucket)
	}
	return nil
}

func (s *Store) partitionPrefix(partition string) string {
	return s.prefix + "b/" + base64.RawURLEncoding.EncodeToString([]byte(partition)) + "/"
}

// key returns the object key of a blob, refusing an id that is not a
// content address.
func (s *Store) key(partition, blobID string) (string, error) {
	if !store.ValidBlobID(blobID) {
		return "", fmt.Errorf("blobs3: %q is not a blob id", blobID)
	}
	return s.partitionPrefix(partition) + strings.TrimPrefix(blobID, "sha256:"), nil
}

// isNotFound reports whether err says the object does not exist (a
// missing bucket is an error, not a missing blob).
func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	r := minio.ToErrorResponse(err)
	if r.Code == "NoSuchBucket" {
		return false
	}
	return r.Code == "NoSuchKey" || r.Code == "NotFound" || r.StatusCode == http.StatusNotFound
}

func info(partition, blobID string, oi minio.ObjectInfo) store.BlobInfo {
	ms, err := strconv.ParseInt(oi.UserMetadata[metaCreated], 10, 64)
	if err != nil {
		ms = oi.LastModified.UnixMilli() // not written by this package
	}
	media, _ := url.QueryUnescape(oi.UserMetadata[metaMedia])
	return store.BlobInfo{Partition: partition, BlobID: blobID, ByteLength: oi.Size, MediaType: media, CreatedAtMs: ms}
}

// StatBlob implements store.BlobStore.
func (s *Store) StatBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, error) {
	k, err := s.key(partition, blobID)
	if err != nil {
		return store.BlobInfo{}, err
	}
	oi, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{})
	if isNotFound(err) {
		return store.BlobInfo{}, store.ErrNotFound
	}
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("blobs3: stat: %w", err)
	}
	return info(partition, blobID, oi), nil
}

// OpenBlob implements store.BlobStore.
func (s *Store) OpenBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, io.ReadCloser, error) {
	k, err := s.key(partition, blobID)
	if err != nil {
		return store.BlobInfo{}, nil, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return store.BlobInfo{}, nil, fmt.Errorf("blobs3: open: %w", err)
	}
	// The first Stat sends the request; its answer describes the bytes
	// the reader then yields.
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		if isNotFound(err) {
			return store.BlobInfo{}, nil, store.ErrNotFound
		}
		return store.BlobInfo{}, nil, fmt.Errorf("blobs3: open: %w", err)
	}
	return info(partition, blobID, oi), obj, nil
}

func meta(nowMs int64, mediaType string) map[string]string {
	m := map[string]string{metaCreated: strconv.FormatInt(nowMs, 10)}
	if mediaType != "" {
		m[metaMedia] = url.QueryEscape(mediaType)
	}
	return m
}

// PutBlob implements store.BlobStore.
func (s *Store) PutBlob(ctx context.Context, partition, blobID, mediaType string, r io.Reader, nowMs int64) error {
	final, err := s.key(partition, blobID)
	if err != nil {
		return err
	}
	if oi, err := s.c.StatObject(ctx, s.bucket, final, minio.StatObjectOptions{}); err == nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("blobs3: put: %w", err)
		}
		if info(partition, blobID, oi).CreatedAtMs >= nowMs {
			return nil
		}
		m := meta(nowMs, "")
		if v, ok := oi.UserMetadata[metaMedia]; ok {
			m[metaMedia] = v
		}
		_, err := s.c.CopyObject(ctx,
			minio.CopyDestOptions{Bucket: s.bucket, Object: final, UserMetadata: m, ReplaceMetadata: true},
			minio.CopySrcOptions{Bucket: s.bucket, Object: final})
		if err != nil {
			return fmt.Errorf("blobs3: put: touch: %w", err)
		}
		return nil
	} else if !isNotFound(err) {
		return fmt.Errorf("blobs3: put: %w", err)
	}
	// An empty body is sent with its length: some servers refuse a
	// streamed one. An error before the first byte stores nothing.
	br := bufio.NewReaderSize(r, 16)
	size := int64(-1)
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		size = 0
	} else if err != nil {
		return fmt.Errorf("blobs3: put: %w", err)
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	tmp := s.prefix + "tmp/upload-" + strconv.FormatInt(nowMs, 10) + "-" + hex.EncodeToString(rb[:])
	up, err := s.c.PutObject(ctx, s.bucket, tmp, br, size, minio.PutObjectOptions{
		UserMetadata:         meta(nowMs, mediaType),
		ContentType:          "application/octet-stream",
		PartSize:             partSize,
		DisableContentSha256: true,
	})
	if err != nil {
		// minio-go aborts a failed multipart upload; make sure, with a
		// fresh context in case ctx ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = s.c.RemoveIncompleteUpload(cctx, s.bucket, tmp)
		_ = s.c.RemoveObject(cctx, s.bucket, tmp, minio.RemoveObjectOptions{})
		cancel()
		return fmt.Errorf("blobs3: put: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = s.c.RemoveObject(cctx, s.bucket, tmp, minio.RemoveObjectOptions{})
		cancel()
	}()
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: final, UserMetadata: meta(nowMs, mediaType), ReplaceMetadata: true}
	src := minio.CopySrcOptions{Bucket: s.bucket, Object: tmp}
	if up.Size > s.maxCopy {
		_, err = s.c.ComposeObject(ctx, dst, src)
	} else {
		_, err = s.c.CopyObject(ctx, dst, src)
	}
	if err != nil {
		return fmt.Errorf("blobs3: put: copy: %w", err)
	}
	return nil
}

// ListBlobs implements store.BlobStore: in key order (partition, then
// blob id); the cursor is the key of the last object examined, relative
// to the prefix.
func (s *Store) ListBlobs(ctx context.Context, createdBeforeMs int64, cursor string, limit int) ([]store.BlobInfo, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := minio.ListObjectsOptions{Prefix: s.prefix + "b/", Recursive: true}
	if cursor != "" {
		opts.StartAfter = s.prefix + cursor
	}
	var out []store.BlobInfo
	for oi := range s.c.ListObjects(ctx, s.bucket, opts) {
		if oi.Err != nil {
			return nil, "", fmt.Errorf("blobs3: list: %w", oi.Err)
		}
		rel := strings.TrimPrefix(oi.Key, s.prefix+"b/")
		enc, h, ok := strings.Cut(rel, "/")
		part, err := base64.RawURLEncoding.DecodeString(enc)
		id := "sha256:" + h
		if !ok || err != nil || !store.ValidBlobID(id) {
			continue
		}
		st, err := s.StatBlob(ctx, string(part), id)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, "", err
		}
		if st.CreatedAtMs < createdBeforeMs {
			out = append(out, st)
			if len(out) == limit {
				return out, strings.TrimPrefix(oi.Key, s.prefix), nil
			}
		}
	}
	return out, "", nil
}

// DeleteBlob implements store.BlobStore.
func (s *Store) DeleteBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64) (bool, error) {
	st, err := s.StatBlob(ctx, partition, blobID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.CreatedAtMs >= createdBeforeMs {
		return false, nil
	}
	k, _ := s.key(partition, blobID)
	if err := s.c.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil {
		return false, fmt.Errorf("blobs3: delete: %w", err)
	}
	return true, nil
}

// startedMs parses the start time from a temporary upload's key.
func (s *Store) startedMs(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"tmp/upload-")
	if !ok {
		return 0, false
	}
	ms, _, _ := strings.Cut(rest, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, err == nil
}

// SweepUploads implements store.BlobStore: temporary objects and
// incomplete multipart uploads of uploads begun before startedBeforeMs
// (the time is in their keys) are removed.
func (s *Store) SweepUploads(ctx context.Context, startedBeforeMs int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the listings on an early return
	defer cancel()
	var n int64
	tmp := s.prefix + "tmp/"
	for u := range s.c.ListIncompleteUploads(ctx, s.bucket, tmp, true) {
		if u.Err != nil {
			if minio.ToErrorResponse(u.Err).Code == "NoSuchUpload" {
				break // some servers' answer when the bucket never had one
			}
			return n, fmt.Errorf("blobs3: sweep: %w", u.Err)
		}
		if ms, ok := s.startedMs(u.Key); ok && ms < startedBeforeMs {
			if err := s.c.RemoveIncompleteUpload(ctx, s.bucket, u.Key); err != nil {
				return n, fmt.Errorf("blobs3: sweep: %w", err)
			}
			n++
		}
	}
	for oi := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: tmp, Recursive: true}) {
		if oi.Err != nil {
			return n, fmt.Errorf("blobs3: sweep: %w", oi.Err)
		}
		if ms, ok := s.startedMs(oi.Key); ok && ms < startedBeforeMs {
			if err := s.c.RemoveObject(ctx, s.bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
				return n, fmt.Errorf("blobs3: sweep: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// PresignBlobGet implements store.BlobPresigner: a URL the object store
// answers with the blob's bytes until ttl passes. The blob need not
// exist (the URL then answers 404).
func (s *Store) PresignBlobGet(ctx context.Context, partition, blobID string, ttl time.Duration) (string, error) {
	k, err := s.key(partition, blobID)
	if err != nil {
		return "", err
	}
	u, err := s.c.PresignedGetObject(ctx, s.bucket, k, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("blobs3: presign: %w", err)
	}
	return u.String(), nil
}
