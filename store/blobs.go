package store

import (
	"context"
	"io"
	"strings"
	"time"
)

// BlobInfo describes a stored blob (§5.9.2).
type BlobInfo struct {
	Partition  string
	BlobID     string
	ByteLength int64
	// MediaType is the advisory media type given at upload, or "" when
	// none was given or the store does not keep one.
	MediaType string
	// CreatedAtMs is when the blob was uploaded last (a re-upload of a
	// stored blob moves it): the start of its grace period before an
	// unreferenced blob may be swept.
	CreatedAtMs int64
}

// BlobStore keeps blob bytes (§5.9.2): content-addressed, per partition,
// durable until swept. No method holds a whole blob in memory: bytes
// stream in and out. All methods are safe for concurrent use.
type BlobStore interface {
	// PutBlob stores the bytes r yields up to io.EOF as the blob (partition,
	// blobID). Any other error from r aborts the upload: nothing is stored,
	// and PutBlob returns that error (wrapped). The caller verifies the
	// bytes (content address, size) in r, which fails before its EOF when
	// they do not match; the store trusts what reaches EOF. When the blob
	// is stored already, PutBlob reads r to its end all the same (an error
	// still fails the call), keeps the stored bytes and sets the blob's
	// CreatedAtMs to nowMs.
	PutBlob(ctx context.Context, partition, blobID, mediaType string, r io.Reader, nowMs int64) error
	// StatBlob describes a stored blob; ErrNotFound when there is none.
	StatBlob(ctx context.Context, partition, blobID string) (BlobInfo, error)
	// OpenBlob returns a reader of a stored blob's bytes, which the caller
	// closes; ErrNotFound when there is none. A blob deleted while it is
	// read may fail the read.
	OpenBlob(ctx context.Context, partition, blobID string) (BlobInfo, io.ReadCloser, error)
	// ListBlobs returns up to limit blobs created before createdBeforeMs,
	// in a store-defined order, from cursor ("" for the start), and the
	// cursor of the next page ("" after the last).
	ListBlobs(ctx context.Context, createdBeforeMs int64, cursor string, limit int) ([]BlobInfo, string, error)
	// DeleteBlob deletes a blob if it was created before createdBeforeMs
	// (a blob uploaded again since is kept), and reports whether it did.
	DeleteBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64) (bool, error)
	// SweepUploads deletes what uploads begun before startedBeforeMs
	// left behind without completing (a crash mid-upload), and returns
	// how many it removed.
	SweepUploads(ctx context.Context, startedBeforeMs int64) (int64, error)
}

// BlobStorer is implemented by drivers that keep blobs in their own
// database.
type BlobStorer interface {
	// BlobStore returns the driver's blob store; it lives as long as the
	// driver.
	BlobStore() BlobStore
}

// BlobRef is a row that references a blob through a blob_ref column.
type BlobRef struct {
	Table string
	RowID string
}

// BlobRefIndex is implemented by stores that keep the blob reference
// index (§5.9.4): for each (partition, blobId), the rows that currently
// reference it. The index is written on the write path
// (BlobRefWriter).
type BlobRefIndex interface {
	// BlobRefs returns up to limit rows of the partition that reference
	// blobID, ordered by (table, row id) bytewise, after the given one
	// (nil: from the start).
	BlobRefs(ctx context.Context, partition, blobID string, after *BlobRef, limit int) ([]BlobRef, error)
}

// BlobSweepGuard is implemented by stores whose blob reference index can
// keep a sweep from deleting a blob that a push references meanwhile
// (§5.9.2: the sweep never deletes a referenced blob).
type BlobSweepGuard interface {
	// DeleteUnreferencedBlob deletes the blob when no row of the
	// partition references blobID, so that no push that references the
	// blob commits between that check and the deletion: such a push
	// either committed before the check (and the blob is kept) or finds
	// the blob gone (blob.not_found). external deletes the bytes from
	// another blob store; nil deletes the store's own blob uploaded before
	// createdBeforeMs. It reports whether the blob was deleted; false also
	// when a push holds the blob's lock (BlobLocker): the next sweep
	// decides.
	DeleteUnreferencedBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64,
		external func(context.Context) (bool, error)) (bool, error)
}

// BlobLocker is implemented by the WriteTx of stores whose
// BlobSweepGuard needs a push to lock the blobs it references before it
// checks that they exist: the lock holds until the transaction ends.
type BlobLocker interface {
	LockBlobs(ctx context.Context, blobIDs []string) error
}

// BlobRefWriter is implemented by the WriteTx of stores that keep the
// blob reference index.
type BlobRefWriter interface {
	// SetBlobRefs makes blobIDs the blobs the row references, in the
	// write transaction: entries of other blobs are removed (a nil list
	// removes all, for a delete).
	SetBlobRefs(ctx context.Context, table, rowID string, blobIDs []string) error
}

// ValidBlobID reports whether id is a content address: "sha256:" and 64
// lowercase hex digits.
func ValidBlobID(id string) bool {
	hex, ok := strings.CutPrefix(id, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// BlobPresigner is implemented by blob stores that can mint a download
// URL of their own (an object store's presigned GET, §5.4 delegated
// presign): the server answers it instead of a URL of its own.
type BlobPresigner interface {
	// PresignBlobGet returns a URL that yields the blob's bytes with a
	// GET until ttl passes.
	PresignBlobGet(ctx context.Context, partition, blobID string, ttl time.Duration) (string, error)
}
