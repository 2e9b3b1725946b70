package sqlitestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/syncgo/syncgo/store"
)

// The blob store (store.BlobStore) and the blob reference index
// (store.BlobRefIndex, store.BlobRefWriter) in the database
// (migrations/002_segments_blobs.sql). A blob's bytes are rows of
// blobChunkBytes in sync_blob_chunks: an upload writes them under a fresh
// upload id, one write each through the single writer (so an upload never
// holds the writer, or a whole blob in memory), and the blob exists once
// its sync_blob_objects row is written after the last chunk. A download
// reads a chunk at a time.

// blobChunkBytes is the size of a stored chunk, and so the memory one
// transfer holds.
const blobChunkBytes = 256 << 10

var (
	_ store.BlobStorer   = (*Store)(nil)
	_ store.BlobRefIndex = (*Store)(nil)
)

// BlobStore returns the blob store kept in the store's database.
func (s *Store) BlobStore() store.BlobStore { return blobStore{s} }

type blobStore struct{ s *Store }

// blobObject is a sync_blob_objects row.
type blobObject struct {
	info     store.BlobInfo
	uploadID string
}

func (b blobStore) object(ctx context.Context, partition, blobID string) (blobObject, error) {
	o := blobObject{info: store.BlobInfo{Partition: partition, BlobID: blobID}}
	err := b.s.read(ctx, func(c *conn) error {
		var media nullString
		err := c.queryRow(`SELECT byte_length, media_type, created_at_ms, upload_id FROM sync_blob_objects
WHERE partition=? AND blob_id=?`, partition, blobID).Scan(&o.info.ByteLength, &media, &o.info.CreatedAtMs, &o.uploadID)
		o.info.MediaType = media.String
		return err
	})
	switch {
	case errors.Is(err, errNoRows):
		return o, store.ErrNotFound
	case err != nil:
		return o, fmt.Errorf("blob %s: %w", blobID, err)
	}
	return o, nil
}

// StatBlob implements store.BlobStore.
func (b blobStore) StatBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, error) {
	o, err := b.object(ctx, partition, blobID)
	return o.info, err
}

// fill reads into buf until it is full or r ends; it returns io.EOF only
// at the end of r, with the bytes read before it.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func newUploadID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PutBlob implements store.BlobStore.
func (b blobStore) PutBlob(ctx context.Context, partition, blobID, mediaType string, r io.Reader, nowMs int64) error {
	if _, err := b.object(ctx, partition, blobID); err == nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("put blob: %w", err)
		}
		return b.s.w.do(ctx, func(_ context.Context, c *conn) error {
			return c.exec("UPDATE sync_blob_objects SET created_at_ms = max(created_at_ms, ?) WHERE partition=? AND blob_id=?",
				nowMs, partition, blobID)
		})
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	upload := newUploadID()
	discard := func() {
		// Best effort: what is left is swept by SweepUploads.
		_ = b.s.w.do(context.WithoutCancel(ctx), func(_ context.Context, c *conn) error {
			return c.exec("DELETE FROM sync_blob_chunks WHERE upload_id=?", upload)
		})
	}
	buf := make([]byte, blobChunkBytes)
	var total int64
	for idx := 0; ; idx++ {
		n, rerr := fill(r, buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			if idx > 0 {
				discard()
			}
			return fmt.Errorf("put blob: %w", rerr)
		}
		if n > 0 {
			chunk := buf[:n]
			if err := b.s.w.do(ctx, func(_ context.Context, c *conn) error {
				return c.exec("INSERT INTO sync_blob_chunks(upload_id, idx, started_at_ms, bytes) VALUES (?,?,?,?)",
					upload, idx, nowMs, chunk)
			}); err != nil {
				discard()
				return fmt.Errorf("put blob: %w", err)
			}
			total += int64(n)
		}
		if rerr != nil {
			break
		}
	}
	err := b.s.w.do(ctx, func(_ context.Context, c *conn) error {
		if err := c.exec(`INSERT INTO sync_blob_objects(partition, blob_id, byte_length, media_type, created_at_ms, upload_id)
VALUES (?,?,?,?,?,?) ON CONFLICT(partition, blob_id) DO UPDATE SET created_at_ms = max(created_at_ms, excluded.created_at_ms)`,
			partition, blobID, total, nullText(mediaType), nowMs, upload); err != nil {
			return err
		}
		var kept string
		if err := c.queryRow("SELECT upload_id FROM sync_blob_objects WHERE partition=? AND blob_id=?", partition, blobID).Scan(&kept); err != nil {
			return err
		}
		if kept != upload {
			// Another upload of the same bytes completed first.
			return c.exec("DELETE FROM sync_blob_chunks WHERE upload_id=?", upload)
		}
		return nil
	})
	if err != nil {
		discard()
		return fmt.Errorf("put blob: %w", err)
	}
	return nil
}

// OpenBlob implements store.BlobStore.
func (b blobStore) OpenBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, io.ReadCloser, error) {
	o, err := b.object(ctx, partition, blobID)
	if err != nil {
		return o.info, nil, err
	}
	return o.info, &chunkReader{ctx: ctx, left: o.info.ByteLength, next: func(ctx context.Context, idx int) ([]byte, error) {
		var chunk []byte
		err := b.s.read(ctx, func(c *conn) error {
			return c.queryRow("SELECT bytes FROM sync_blob_chunks WHERE upload_id=? AND idx=?", o.uploadID, idx).Scan(&chunk)
		})
		if errors.Is(err, errNoRows) {
			return nil, fmt.Errorf("blob %s: chunk %d is missing (deleted while read?)", blobID, idx)
		}
		return chunk, err
	}}, nil
}

// chunkReader reads a blob chunk by chunk.
type chunkReader struct {
	ctx  context.Context
	next func(ctx context.Context, idx int) ([]byte, error)
	idx  int
	cur  []byte
	left int64 // bytes not yet returned
	err  error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.cur) == 0 {
		if r.left <= 0 {
			r.err = io.EOF
			return 0, io.EOF
		}
		chunk, err := r.next(r.ctx, r.idx)
		if err == nil && (len(chunk) == 0 || int64(len(chunk)) > r.left) {
			err = fmt.Errorf("blob chunk %d has %d bytes, %d are left", r.idx, len(chunk), r.left)
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		r.idx++
		r.cur = chunk
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.left -= int64(n)
	return n, nil
}

func (r *chunkReader) Close() error {
	r.cur, r.err = nil, errors.New("blob reader closed")
	return nil
}

// ListBlobs implements store.BlobStore: by (partition, blob id); the
// cursor is the last pair, NUL-separated.
func (b blobStore) ListBlobs(ctx context.Context, createdBeforeMs int64, cursor string, limit int) ([]store.BlobInfo, string, error) {
	afterPart, afterID, _ := strings.Cut(cursor, "\x00")
	var out []store.BlobInfo
	err := b.s.read(ctx, func(c *conn) error {
		rows, err := c.query(`SELECT partition, blob_id, byte_length, media_type, created_at_ms FROM sync_blob_objects
WHERE created_at_ms < ? AND (partition > ? OR (partition = ? AND blob_id > ?))
ORDER BY partition, blob_id LIMIT ?`, createdBeforeMs, afterPart, afterPart, afterID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				i     store.BlobInfo
				media nullString
			)
			if err := rows.Scan(&i.Partition, &i.BlobID, &i.ByteLength, &media, &i.CreatedAtMs); err != nil {
				return err
			}
			i.MediaType = media.String
			out = append(out, i)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", fmt.Errorf("list blobs: %w", err)
	}
	next := ""
	if len(out) == limit && limit > 0 {
		last := out[len(out)-1]
		next = last.Partition + "\x00" + last.BlobID
	}
	return out, next, nil
}

// DeleteBlob implements store.BlobStore.
func (b blobStore) DeleteBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64) (bool, error) {
	deleted := false
	err := b.s.w.do(ctx, func(_ context.Context, c *conn) error {
		var err error
		deleted, err = deleteBlobIn(c, partition, blobID, createdBeforeMs)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete blob: %w", err)
	}
	return deleted, nil
}

// deleteBlobIn deletes a blob uploaded before createdBeforeMs and its
// chunks on the write connection.
func deleteBlobIn(c *conn, partition, blobID string, createdBeforeMs int64) (bool, error) {
	var upload string
	err := c.queryRow("SELECT upload_id FROM sync_blob_objects WHERE partition=? AND blob_id=? AND created_at_ms < ?",
		partition, blobID, createdBeforeMs).Scan(&upload)
	if errors.Is(err, errNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := c.exec("DELETE FROM sync_blob_objects WHERE partition=? AND blob_id=?", partition, blobID); err != nil {
		return false, err
	}
	return true, c.exec("DELETE FROM sync_blob_chunks WHERE upload_id=?", upload)
}

// SweepUploads implements store.BlobStore: it deletes the chunks of
// uploads begun before startedBeforeMs that no blob names, in batches.
func (b blobStore) SweepUploads(ctx context.Context, startedBeforeMs int64) (int64, error) {
	var total int64
	for {
		var n int64
		err := b.s.w.do(ctx, func(_ context.Context, c *conn) error {
			var err error
			n, err = c.execChanges(`DELETE FROM sync_blob_chunks WHERE rowid IN (
  SELECT c.rowid FROM sync_blob_chunks c WHERE c.started_at_ms < ?
    AND NOT EXISTS (SELECT 1 FROM sync_blob_objects o WHERE o.upload_id = c.upload_id) LIMIT ?)`, startedBeforeMs, sweepBatch)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sweep uploads: %w", err)
		}
		total += n
		if n < sweepBatch {
			return total, nil
		}
	}
}

// BlobRefs implements store.BlobRefIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, blobID string, after *store.BlobRef, limit int) ([]store.BlobRef, error) {
	var a store.BlobRef
	if after != nil {
		a = *after
	}
	var out []store.BlobRef
	err := s.read(ctx, func(c *conn) error {
		rows, err := c.query(`SELECT tbl, row_id FROM sync_blob_refs WHERE partition=? AND blob_id=?
  AND (tbl > ? OR (tbl = ? AND row_id > ?)) ORDER BY tbl, row_id LIMIT ?`, partition, blobID, a.Table, a.Table, a.RowID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.BlobRef
			if err := rows.Scan(&r.Table, &r.RowID); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("blob refs: %w", err)
	}
	return out, nil
}

// SetBlobRefs implements store.BlobRefWriter.
func (tx *writeTx) SetBlobRefs(ctx context.Context, table, rowID string, blobIDs []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := tx.c.exec("DELETE FROM sync_blob_refs WHERE partition=? AND tbl=? AND row_id=?", tx.partition, table, rowID); err != nil {
		return fmt.Errorf("blob refs of %s/%s: %w", table, rowID, err)
	}
	for _, id := range blobIDs {
		if err := tx.c.exec("INSERT OR IGNORE INTO sync_blob_refs(partition, tbl, row_id, blob_id) VALUES (?,?,?,?)",
			tx.partition, table, rowID, id); err != nil {
			return fmt.Errorf("blob refs of %s/%s: %w", table, rowID, err)
		}
	}
	return nil
}

// inWriterKey marks the context of a writer job whose callee may write
// through the store again (writer.do runs such a write in the job).
type inWriterKey struct{}

var _ store.BlobSweepGuard = (*Store)(nil)

// DeleteUnreferencedBlob implements store.BlobSweepGuard: the check of the
// index and the deletion run in one writer job, the last of its batch. A
// push checks that its blobs exist and commits in the writer too, so it
// runs before the job, whose check sees its references, or in a later
// batch, after the deletion committed (this store's own blobs are deleted
// in the job's transaction, which no push of the same batch follows).
func (s *Store) DeleteUnreferencedBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64,
	external func(context.Context) (bool, error)) (bool, error) {
	deleted := false
	err := s.w.doLast(ctx, func(ctx context.Context, c *conn) error {
		var one int
		err := c.queryRow("SELECT 1 FROM sync_blob_refs WHERE partition=? AND blob_id=? LIMIT 1", partition, blobID).Scan(&one)
		if err == nil || !errors.Is(err, errNoRows) {
			return err // referenced, or the read failed
		}
		if external == nil {
			deleted, err = deleteBlobIn(c, partition, blobID, createdBeforeMs)
			return err
		}
		deleted, err = external(context.WithValue(ctx, inWriterKey{}, c))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete unreferenced blob: %w", err)
	}
	return deleted, nil
}
