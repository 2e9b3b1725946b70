package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// The blob store (store.BlobStore) and the blob reference index
// (store.BlobRefIndex, store.BlobRefWriter) in the database
// (migrations/004_segments_blobs.sql). A blob's bytes are rows of
// blobChunkBytes in sync_blob_chunks: an upload inserts them one
// statement each under a fresh upload id (no transaction stays open while
// a client uploads, and no whole blob is held in memory), and the blob
// exists once its sync_blob_objects row is written after the last chunk.
// A download reads a chunk at a time. Every process on the database
// serves every blob.

// blobChunkBytes is the size of a stored chunk, and so the memory one
// transfer holds.
const blobChunkBytes = 256 << 10

var (
	_ store.BlobStorer    = (*Store)(nil)
	_ store.BlobRefIndex  = (*Store)(nil)
	_ store.BlobRefWriter = (*writeTx)(nil)
)

// BlobStore returns the blob store kept in the store's database.
func (s *Store) BlobStore() store.BlobStore { return blobStore{s} }

type blobStore struct{ s *Store }

type blobObject struct {
	info     store.BlobInfo
	uploadID string
}

func (b blobStore) object(ctx context.Context, partition, blobID string) (blobObject, error) {
	o := blobObject{info: store.BlobInfo{Partition: partition, BlobID: blobID}}
	if err := b.s.check(); err != nil {
		return o, err
	}
	var media *string
	err := b.s.pool.QueryRow(ctx, `SELECT byte_length, media_type, created_at_ms, upload_id FROM sync_blob_objects
WHERE partition = $1 AND blob_id = $2`, partition, blobID).Scan(&o.info.ByteLength, &media, &o.info.CreatedAtMs, &o.uploadID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return o, store.ErrNotFound
	case err != nil:
		return o, fmt.Errorf("blob %s: %w", blobID, err)
	}
	if media != nil {
		o.info.MediaType = *media
	}
	return o, nil
}

// StatBlob implements store.BlobStore.
func (b blobStore) StatBlob(ctx context.Context, partition, blobID string) (store.BlobInfo, error) {
	return retry(b.s, ctx, "StatBlob", func() (store.BlobInfo, error) { return b.statBlobOnce(ctx, partition, blobID) })
}

// statBlobOnce is StatBlob, once (see "Lost connections", retry.go).
func (b blobStore) statBlobOnce(ctx context.Context, partition, blobID string) (store.BlobInfo, error) {
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

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PutBlob implements store.BlobStore.
func (b blobStore) PutBlob(ctx context.Context, partition, blobID, mediaType string, r io.Reader, nowMs int64) error {
	if err := b.s.checkWrite(); err != nil {
		return err
	}
	if _, err := b.object(ctx, partition, blobID); err == nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("put blob: %w", err)
		}
		_, err := b.s.pool.Exec(ctx, `UPDATE sync_blob_objects SET created_at_ms = GREATEST(created_at_ms, $3)
WHERE partition = $1 AND blob_id = $2`, partition, blobID, nowMs)
		if err != nil {
			return fmt.Errorf("put blob: %w", err)
		}
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	var rb [16]byte
	_, _ = rand.Read(rb[:])
	upload := hex.EncodeToString(rb[:])
	discard := func() {
		// Best effort: what is left is swept by SweepUploads.
		_, _ = b.s.pool.Exec(context.WithoutCancel(ctx), "DELETE FROM sync_blob_chunks WHERE upload_id = $1", upload)
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
			if _, err := b.s.pool.Exec(ctx, `INSERT INTO sync_blob_chunks(upload_id, idx, started_at_ms, bytes)
VALUES ($1, $2, $3, $4)`, upload, idx, nowMs, buf[:n]); err != nil {
				discard()
				return fmt.Errorf("put blob: %w", err)
			}
			total += int64(n)
		}
		if rerr != nil {
			break
		}
	}
	err := pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		var kept string
		if err := tx.QueryRow(ctx, `INSERT INTO sync_blob_objects(partition, blob_id, byte_length, media_type, created_at_ms, upload_id)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (partition, blob_id) DO UPDATE SET created_at_ms = GREATEST(sync_blob_objects.created_at_ms, EXCLUDED.created_at_ms)
RETURNING upload_id`, partition, blobID, total, nullText(mediaType), nowMs, upload).Scan(&kept); err != nil {
			return err
		}
		if kept != upload {
			// Another upload of the same bytes completed first.
			_, err := tx.Exec(ctx, "DELETE FROM sync_blob_chunks WHERE upload_id = $1", upload)
			return err
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
		err := b.s.pool.QueryRow(ctx, "SELECT bytes FROM sync_blob_chunks WHERE upload_id = $1 AND idx = $2", o.uploadID, idx).Scan(&chunk)
		if errors.Is(err, pgx.ErrNoRows) {
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

// ListBlobs implements store.BlobStore: by (partition, blob id) bytewise;
// the cursor is the last pair, NUL-separated.
func (b blobStore) ListBlobs(ctx context.Context, createdBeforeMs int64, cursor string, limit int) ([]store.BlobInfo, string, error) {
	if err := b.s.check(); err != nil {
		return nil, "", err
	}
	afterPart, afterID, _ := strings.Cut(cursor, "\x00")
	rows, err := b.s.pool.Query(ctx, `SELECT partition, blob_id, byte_length, media_type, created_at_ms FROM sync_blob_objects
WHERE created_at_ms < $1 AND (partition COLLATE "C", blob_id COLLATE "C") > ($2, $3)
ORDER BY partition COLLATE "C", blob_id COLLATE "C" LIMIT $4`, createdBeforeMs, afterPart, afterID, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list blobs: %w", err)
	}
	defer rows.Close()
	var out []store.BlobInfo
	for rows.Next() {
		var (
			i     store.BlobInfo
			media *string
		)
		if err := rows.Scan(&i.Partition, &i.BlobID, &i.ByteLength, &media, &i.CreatedAtMs); err != nil {
			return nil, "", fmt.Errorf("list blobs: %w", err)
		}
		if media != nil {
			i.MediaType = *media
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
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
	if err := b.s.checkWrite(); err != nil {
		return false, err
	}
	deleted := false
	err := pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		var err error
		deleted, err = deleteBlobIn(ctx, tx, partition, blobID, createdBeforeMs)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete blob: %w", err)
	}
	return deleted, nil
}

// deleteBlobIn deletes a blob uploaded before createdBeforeMs and its
// chunks in tx.
func deleteBlobIn(ctx context.Context, tx pgx.Tx, partition, blobID string, createdBeforeMs int64) (bool, error) {
	var upload string
	err := tx.QueryRow(ctx, `DELETE FROM sync_blob_objects WHERE partition = $1 AND blob_id = $2 AND created_at_ms < $3
RETURNING upload_id`, partition, blobID, createdBeforeMs).Scan(&upload)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, "DELETE FROM sync_blob_chunks WHERE upload_id = $1", upload)
	return err == nil, err
}

// SweepUploads implements store.BlobStore: it deletes the chunks of
// uploads begun before startedBeforeMs that no blob names, in batches.
func (b blobStore) SweepUploads(ctx context.Context, startedBeforeMs int64) (int64, error) {
	if err := b.s.checkWrite(); err != nil {
		return 0, err
	}
	var total int64
	for {
		tag, err := b.s.pool.Exec(ctx, `DELETE FROM sync_blob_chunks WHERE ctid IN (
  SELECT c.ctid FROM sync_blob_chunks c WHERE c.started_at_ms < $1
    AND NOT EXISTS (SELECT 1 FROM sync_blob_objects o WHERE o.upload_id = c.upload_id) LIMIT $2)`, startedBeforeMs, sweepBatch)
		if err != nil {
			return total, fmt.Errorf("sweep uploads: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			return total, nil
		}
	}
}

// BlobRefs implements store.BlobRefIndex.
func (s *Store) BlobRefs(ctx context.Context, partition, blobID string, after *store.BlobRef, limit int) ([]store.BlobRef, error) {
	return retry(s, ctx, "BlobRefs", func() ([]store.BlobRef, error) { return s.blobRefsOnce(ctx, partition, blobID, after, limit) })
}

// blobRefsOnce is BlobRefs, once (see "Lost connections", retry.go).
func (s *Store) blobRefsOnce(ctx context.Context, partition, blobID string, after *store.BlobRef, limit int) ([]store.BlobRef, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var a store.BlobRef
	if after != nil {
		a = *after
	}
	rows, err := s.pool.Query(ctx, `SELECT tbl, row_id FROM sync_blob_refs WHERE partition = $1 AND blob_id = $2
  AND (tbl COLLATE "C", row_id COLLATE "C") > ($3, $4)
ORDER BY tbl COLLATE "C", row_id COLLATE "C" LIMIT $5`, partition, blobID, a.Table, a.RowID, limit)
	if err != nil {
		return nil, fmt.Errorf("blob refs: %w", err)
	}
	defer rows.Close()
	var out []store.BlobRef
	for rows.Next() {
		var r store.BlobRef
		if err := rows.Scan(&r.Table, &r.RowID); err != nil {
			return nil, fmt.Errorf("blob refs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("blob refs: %w", err)
	}
	return out, nil
}

const (
	sqlPruneBlobRefs = `DELETE FROM sync_blob_refs WHERE partition = $1 AND tbl = $2 AND row_id = $3
  AND NOT (blob_id = ANY($4::text[]))`
	sqlInsertBlobRefs = `INSERT INTO sync_blob_refs(partition, tbl, row_id, blob_id)
SELECT $1, $2, $3, unnest($4::text[]) ON CONFLICT DO NOTHING`
)

// SetBlobRefs implements store.BlobRefWriter: two statements deferred to
// the transaction's next round trip, like the row's own writes.
func (t *writeTx) SetBlobRefs(_ context.Context, table, rowID string, blobIDs []string) error {
	if t.done {
		return errTxDone
	}
	ids := make([]string, 0, len(blobIDs))
	ids = append(ids, blobIDs...)
	_ = t.write("prune blob refs", sqlPruneBlobRefs, t.partition, table, rowID, ids)
	if len(ids) > 0 {
		_ = t.write("insert blob refs", sqlInsertBlobRefs, t.partition, table, rowID, ids)
	}
	return nil
}

// A blob's lock is a transaction-scoped advisory lock on its partition and
// id: a push takes it shared before it checks that the blob exists
// (LockBlobs) and holds it to its commit; the sweep tries it exclusively
// around its check of the reference index and the deletion
// (DeleteUnreferencedBlob), and skips a blob a push holds. Neither waits
// for anything else while it holds the lock, so the lock closes no cycle
// with the partition's row lock that a push holds from its first
// statement. Advisory locks are database-wide and the key names no
// schema: deployments in other schemas of one database that push the
// same blob id in the same partition name can make a sweep skip a blob,
// which the next sweep takes. (Adding the schema to the key would let a
// process of the older key and one of the newer miss each other during
// a deploy.)
const (
	sqlLockBlobShared = `SELECT pg_advisory_xact_lock_shared(hashtextextended('syncgo.blob:' || $1 || '/' || $2, 0))`
	sqlTryLockBlob    = `SELECT pg_try_advisory_xact_lock(hashtextextended('syncgo.blob:' || $1 || '/' || $2, 0))`
)

var (
	_ store.BlobSweepGuard = (*Store)(nil)
	_ store.BlobLocker     = (*writeTx)(nil)
)

// LockBlobs implements store.BlobLocker.
func (t *writeTx) LockBlobs(ctx context.Context, blobIDs []string) error {
	if err := t.settle(ctx); err != nil {
		return fmt.Errorf("lock blobs: %w", err)
	}
	br, err := t.send(ctx, func(b *pgx.Batch) {
		for _, id := range blobIDs {
			b.Queue(sqlLockBlobShared, t.partition, id)
		}
	})
	if err != nil {
		return fmt.Errorf("lock blobs: %w", err)
	}
	for range blobIDs {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err = closeBatch(br, err); err != nil {
		return fmt.Errorf("lock blobs: %w", err)
	}
	return nil
}

// DeleteUnreferencedBlob implements store.BlobSweepGuard.
func (s *Store) DeleteUnreferencedBlob(ctx context.Context, partition, blobID string, createdBeforeMs int64,
	external func(context.Context) (bool, error)) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	deleted := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, sqlTryLockBlob, partition, blobID).Scan(&locked); err != nil || !locked {
			return err // a push holds it: the next sweep decides
		}
		var one int
		err := tx.QueryRow(ctx, "SELECT 1 FROM sync_blob_refs WHERE partition = $1 AND blob_id = $2 LIMIT 1",
			partition, blobID).Scan(&one)
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return err // referenced, or the read failed
		}
		if external != nil {
			deleted, err = external(ctx)
			return err
		}
		deleted, err = deleteBlobIn(ctx, tx, partition, blobID, createdBeforeMs)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete unreferenced blob: %w", err)
	}
	return deleted, nil
}
