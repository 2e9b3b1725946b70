// Package blobfs is a blob store (store.BlobStore, §5.9.2) on a local or
// shared filesystem: one file per blob, written to a staging file first
// and renamed into place once the whole body arrived and was verified, so
// that a reader never sees a partial blob and no transfer holds a blob in
// memory. Several server processes may share the directory (a network
// filesystem with atomic rename).
//
// Layout under the root directory:
//
//	tmp/upload-<startedAtMs>-<random>     uploads in progress
//	p/<partition key>/partition           the partition's name
//	p/<partition key>/<hh>/<64 hex>       a blob's bytes (hh: its first two digits)
//
// The partition key is a hash of the partition, so any partition name is
// a safe path. A blob's upload time (BlobInfo.CreatedAtMs) is its file's
// modification time. The advisory media type is not kept.
package blobfs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncgo/syncgo/store"
)

// Store is a filesystem blob store. It is safe for concurrent use, also
// by several processes on one directory.
type Store struct {
	root string
}

var _ store.BlobStore = (*Store)(nil)

// Open returns the store rooted at dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "tmp"), filepath.Join(dir, "p")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("blobfs: %w", err)
		}
	}
	return &Store{root: dir}, nil
}

func partitionKey(partition string) string {
	sum := sha256.Sum256([]byte(partition))
	return hex.EncodeToString(sum[:16])
}

// path returns the file of a blob, refusing an id that is not a content
// address (which could name another path).
func (s *Store) path(partition, blobID string) (string, error) {
	if !store.ValidBlobID(blobID) {
		return "", fmt.Errorf("blobfs: %q is not a blob id", blobID)
	}
	h := strings.TrimPrefix(blobID, "sha256:")
	return filepath.Join(s.root, "p", partitionKey(partition), h[:2], h), nil
}

func (s *Store) info(partition, blobID string, fi fs.FileInfo) store.BlobInfo {
	return store.BlobInfo{Partition: partition, BlobID: blobID, ByteLength: fi.Size(), CreatedAtMs: fi.ModTime().UnixMilli()}
}

// StatBlob implements store.BlobStore.
func (s *Store) StatBlob(_ context.Context, partition, blobID string) (store.BlobInfo, error) {
	p, err := s.path(partition, blobID)
	if err != nil {
		return store.BlobInfo{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return store.BlobInfo{}, store.ErrNotFound
	}
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("blobfs: %w", err)
	}
	return s.info(partition, blobID, fi), nil
}

// OpenBlob implements store.BlobStore.
func (s *Store) OpenBlob(_ context.Context, partition, blobID string) (store.BlobInfo, io.ReadCloser, error) {
	p, err := s.path(partition, blobID)
	if err != nil {
		return store.BlobInfo{}, nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return store.BlobInfo{}, nil, store.ErrNotFound
	}
	if err != nil {
		return store.BlobInfo{}, nil, fmt.Errorf("blobfs: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return store.BlobInfo{}, nil, fmt.Errorf("blobfs: %w", err)
	}
	return s.info(partition, blobID, fi), f, nil
}

// touch sets a file's modification time to nowMs unless it is later.
func touch(p string, fi fs.FileInfo, nowMs int64) error {
	if fi.ModTime().UnixMilli() >= nowMs {
		return nil
	}
	t := time.UnixMilli(nowMs)
	return os.Chtimes(p, t, t)
}

// PutBlob implements store.BlobStore.
func (s *Store) PutBlob(_ context.Context, partition, blobID, _ string, r io.Reader, nowMs int64) (err error) {
	final, err := s.path(partition, blobID)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(final); err == nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("blobfs: put: %w", err)
		}
		return touch(final, fi, nowMs)
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	tmp := filepath.Join(s.root, "tmp", "upload-"+strconv.FormatInt(nowMs, 10)+"-"+hex.EncodeToString(rb[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = io.CopyBuffer(struct{ io.Writer }{f}, r, make([]byte, 64<<10)); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	t := time.UnixMilli(nowMs)
	if err = os.Chtimes(tmp, t, t); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	if err = s.ensurePartition(partition); err != nil {
		return err
	}
	dir := filepath.Dir(final)
	if err = os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	// A concurrent upload of the same bytes may rename first: the file
	// is replaced with identical bytes.
	if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("blobfs: put: %w", err)
	}
	return syncDir(dir)
}

// ensurePartition records the partition's name in its directory.
func (s *Store) ensurePartition(partition string) error {
	dir := filepath.Join(s.root, "p", partitionKey(partition))
	name := filepath.Join(dir, "partition")
	if _, err := os.Stat(name); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("blobfs: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".partition-*")
	if err != nil {
		return fmt.Errorf("blobfs: %w", err)
	}
	_, werr := tmp.WriteString(partition)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), name)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("blobfs: %w", werr)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("blobfs: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("blobfs: sync %s: %w", dir, err)
	}
	return nil
}

// sortedDir lists a directory's entry names in order; a missing directory
// is empty.
func sortedDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out, nil
}

// ListBlobs implements store.BlobStore: by partition key, then blob id;
// the cursor is "<partition key>/<hex>" of the last entry examined.
func (s *Store) ListBlobs(_ context.Context, createdBeforeMs int64, cursor string, limit int) ([]store.BlobInfo, string, error) {
	afterKey, afterHex, _ := strings.Cut(cursor, "/")
	keys, err := sortedDir(filepath.Join(s.root, "p"))
	if err != nil {
		return nil, "", fmt.Errorf("blobfs: list: %w", err)
	}
	var out []store.BlobInfo
	for _, key := range keys {
		if key < afterKey {
			continue
		}
		pdir := filepath.Join(s.root, "p", key)
		name, err := os.ReadFile(filepath.Join(pdir, "partition"))
		if err != nil {
			continue // a partition directory being created
		}
		shards, err := sortedDir(pdir)
		if err != nil {
			return nil, "", fmt.Errorf("blobfs: list: %w", err)
		}
		for _, shard := range shards {
			if len(shard) != 2 {
				continue
			}
			files, err := sortedDir(filepath.Join(pdir, shard))
			if err != nil {
				return nil, "", fmt.Errorf("blobfs: list: %w", err)
			}
			for _, h := range files {
				if key == afterKey && h <= afterHex {
					continue
				}
				id := "sha256:" + h
				if !store.ValidBlobID(id) {
					continue
				}
				fi, err := os.Stat(filepath.Join(pdir, shard, h))
				if err != nil {
					continue // deleted meanwhile
				}
				if fi.ModTime().UnixMilli() >= createdBeforeMs {
					continue
				}
				out = append(out, s.info(string(name), id, fi))
				if len(out) == limit {
					return out, key + "/" + h, nil
				}
			}
		}
	}
	return out, "", nil
}

// DeleteBlob implements store.BlobStore.
func (s *Store) DeleteBlob(_ context.Context, partition, blobID string, createdBeforeMs int64) (bool, error) {
	p, err := s.path(partition, blobID)
	if err != nil {
		return false, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("blobfs: delete: %w", err)
	}
	if fi.ModTime().UnixMilli() >= createdBeforeMs {
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("blobfs: delete: %w", err)
	}
	return true, nil
}

// SweepUploads implements store.BlobStore: staging files of uploads begun
// before startedBeforeMs (the time is in their names) are removed.
func (s *Store) SweepUploads(_ context.Context, startedBeforeMs int64) (int64, error) {
	names, err := sortedDir(filepath.Join(s.root, "tmp"))
	if err != nil {
		return 0, fmt.Errorf("blobfs: sweep: %w", err)
	}
	var n int64
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, "upload-")
		if !ok {
			continue
		}
		ms, _, _ := strings.Cut(rest, "-")
		started, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || started >= startedBeforeMs {
			continue
		}
		if err := os.Remove(filepath.Join(s.root, "tmp", name)); err == nil {
			n++
		}
	}
	return n, nil
}
