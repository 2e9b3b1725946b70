package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncgo/syncgo/hostapi"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Blobs (§5.9): the push-time existence check (§5.9.6, §6.6) and the
// reference index (§5.9.4), maintained by the one hook the write path
// calls for every row it writes or deletes (applier.blobRefs); download
// authorization from the referencing rows (§5.9.5); and the sweep of
// unreferenced blobs after a grace period (§5.9.2).

// blobIDOf returns the blobId of a canonical BlobRef document, which the
// row codec validated: {"blobId":"sha256:<64 hex>",...}.
func blobIDOf(ref string) string {
	const prefix = `{"blobId":"`
	const idLen = len("sha256:") + 64
	if len(ref) < len(prefix)+idLen {
		return ""
	}
	return ref[len(prefix) : len(prefix)+idLen]
}

// blobIDs returns the distinct blobs a row's values reference.
func blobIDs(t *schema.CompiledTable, vals []wire.Value) []string {
	var ids []string
	for _, c := range t.BlobRefColumns() {
		if c < len(vals) && !vals[c].Null {
			if id := blobIDOf(vals[c].Str); store.ValidBlobID(id) && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// blobsExist is the write path's blob existence check (§6.6): every blob
// that a row an upsert writes (vals, its full values) references must be
// stored, or the operation is rejected with blob.not_found. It runs beside
// the scope check, before the CRDT merge and the validators (§6.7's
// order), so that neither sees a reference to a blob that is not there.
// A reference the stored row (stored, nil for an insert) holds already is
// not a new one: the actor passed the scope check on that row, so
// mayReference is not asked. Tables without blob_ref columns, and servers
// without a blob store, skip it.
func (a *applier) blobsExist(ctx context.Context, i int, t *schema.CompiledTable, vals, stored []wire.Value) (*rejection, error) {
	blobs := a.r.e.cfg.Blobs
	if len(t.BlobRefColumns()) == 0 || blobs == nil {
		return nil, nil
	}
	if _, ok := a.tx.(store.BlobRefWriter); !ok {
		return nil, nil
	}
	ids := blobIDs(t, vals)
	var kept []string
	if stored != nil {
		kept = blobIDs(t, stored)
	}
	if l, ok := a.tx.(store.BlobLocker); ok {
		// Locked before the check, so that a sweep deleting one of them
		// ends before it (store.BlobSweepGuard).
		unchecked := make([]string, 0, len(ids))
		for _, id := range ids {
			if !a.blobsPresent[id] {
				unchecked = append(unchecked, id)
			}
		}
		if len(unchecked) > 0 {
			if err := l.LockBlobs(ctx, unchecked); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range ids {
		if a.blobsPresent[id] {
			continue
		}
		info, err := blobs.StatBlob(ctx, a.r.auth.Partition, id)
		if errors.Is(err, store.ErrNotFound) {
			return opError(i, syncerr.CodeBlobNotFound, "the row references a blob that was not uploaded"), nil
		}
		if err != nil {
			return nil, fmt.Errorf("blob existence check: %w", err)
		}
		if !slices.Contains(kept, id) {
			ok, err := a.r.e.mayReference(ctx, a.r.auth.Partition, id, info, a.r.allowed)
			if err != nil {
				return nil, fmt.Errorf("blob existence check: %w", err)
			}
			if !ok {
				return opError(i, syncerr.CodeBlobNotFound, "the row references a blob not uploaded lately that no row the actor may read references: upload it again"), nil
			}
		}
		if a.blobsPresent == nil {
			a.blobsPresent = map[string]bool{}
		}
		a.blobsPresent[id] = true
	}
	return nil, nil
}

// blobRefs makes the row's entries in the reference index its references
// (none for a delete, vals nil). The upserts that call it checked the
// blobs with blobsExist first. It runs in the commit's transaction, so a
// rejected or rolled-back commit leaves the index as it was.
func (a *applier) blobRefs(ctx context.Context, t *schema.CompiledTable, rowID string, vals []wire.Value) error {
	w, ok := a.tx.(store.BlobRefWriter)
	if len(t.BlobRefColumns()) == 0 || a.r.e.cfg.Blobs == nil || !ok {
		return nil
	}
	return w.SetBlobRefs(ctx, t.Name(), rowID, blobIDs(t, vals))
}

// Blobs returns the blob store, or nil when blobs are off.
func (e *Engine) Blobs() store.BlobStore { return e.cfg.Blobs }

// blobAuthPage is the page of referencing rows an authorization reads at
// a time.
const blobAuthPage = 100

// AuthorizeBlob decides a blob download (§5.9.5): the actor's scopes are
// resolved afresh, and the download is allowed iff at least one row of
// the partition that references the blob passes the write-path scope check
// (§3.4) with its stored scope values. Otherwise, or when the resolver
// fails or the index is empty, it is blob.forbidden.
func (e *Engine) AuthorizeBlob(ctx context.Context, auth Auth, blobID string) error {
	forbidden := syncerr.New(syncerr.CodeBlobForbidden, "no row the actor may see references this blob")
	idx, ok := e.cfg.Store.(store.BlobRefIndex)
	if !ok {
		return forbidden
	}
	allowed, err := e.resolveAllowed(ctx, auth)
	if err != nil {
		return syncerr.New(syncerr.CodeBlobForbidden, "scopes could not be resolved")
	}
	ok, err = e.readableRef(ctx, idx, auth.Partition, blobID, allowed)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden
	}
	return nil
}

// readableRef reports whether a row of the partition that an actor with
// the allowed scopes may read references the blob.
func (e *Engine) readableRef(ctx context.Context, idx store.BlobRefIndex, partition, blobID string, allowed map[string][]string) (bool, error) {
	var after *store.BlobRef
	for {
		refs, err := idx.BlobRefs(ctx, partition, blobID, after, blobAuthPage)
		if err != nil {
			return false, err
		}
		for _, ref := range refs {
			t, ok := e.cfg.Schema.Table(ref.Table)
			if !ok {
				continue
			}
			row, err := e.cfg.Store.Row(ctx, partition, ref.Table, ref.RowID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return false, err
			}
			if rowAuthorized(t, row.Scopes, allowed) {
				return true, nil
			}
		}
		if len(refs) < blobAuthPage {
			return false, nil
		}
		after = &refs[len(refs)-1]
	}
}

// mayReference decides whether an actor with the allowed scopes may
// reference a stored blob in a row it writes. Knowing a blob's id must
// not be enough to read it (§5.9.5: a blobId is never a capability): a
// row in the actor's own scope that references the blob would make the
// download authorization pass. So a new reference needs the blob
// uploaded within the grace period (an upload proves that the client
// holds the bytes, and an upload of a stored blob renews its time; past
// the grace period an unreferenced blob is swept anyway), or a row that
// the actor may read referencing it already. Otherwise the push gets
// blob.not_found, and a client that holds the bytes uploads them again.
func (e *Engine) mayReference(ctx context.Context, partition, blobID string, info store.BlobInfo, allowed map[string][]string) (bool, error) {
	if e.cfg.Now()-info.CreatedAtMs <= e.cfg.Limits.BlobGracePeriod.Milliseconds() {
		return true, nil
	}
	idx, ok := e.cfg.Store.(store.BlobRefIndex)
	if !ok {
		return true, nil
	}
	return e.readableRef(ctx, idx, partition, blobID, allowed)
}

// MayReferenceBlob is mayReference for an upload grant's "present" answer:
// a client told the blob is present skips its upload, so it is told only
// when its push could reference the blob.
func (e *Engine) MayReferenceBlob(ctx context.Context, auth Auth, info store.BlobInfo) (bool, error) {
	allowed, err := e.resolveAllowed(ctx, auth)
	if err != nil {
		allowed = nil
	}
	return e.mayReference(ctx, auth.Partition, info.BlobID, info, allowed)
}

// rowAuthorized is the §3.4 stored-row check: every declared scope
// variable of the table has a stored value the actor is allowed ("*"
// allows any).
func rowAuthorized(t *schema.CompiledTable, stored wire.StoredScopes, allowed map[string][]string) bool {
	for _, v := range t.Variables() {
		val, ok := "", false
		for _, s := range stored {
			if s.Key == v {
				val, ok = s.Value, true
				break
			}
		}
		if !ok {
			return false
		}
		if !slices.Contains(allowed[v], "*") && !slices.Contains(allowed[v], val) {
			return false
		}
	}
	return true
}

// BlobSweep is hostapi.BlobSweep.
type BlobSweep = hostapi.BlobSweep

// blobSweepPage is the page of blobs a sweep lists at a time.
const blobSweepPage = 500

// SweepBlobs deletes the blobs uploaded more than Limits.BlobGracePeriod
// ago that no row references (§5.9.2), and what interrupted uploads left
// behind as long ago. A blob uploaded again since is kept (its grace
// period restarted).
func (e *Engine) SweepBlobs(ctx context.Context) (BlobSweep, error) {
	var out BlobSweep
	blobs := e.cfg.Blobs
	idx, ok := e.cfg.Store.(store.BlobRefIndex)
	if blobs == nil || !ok {
		return out, nil
	}
	cutoff := e.cfg.Now() - e.cfg.Limits.BlobGracePeriod.Milliseconds()
	n, err := blobs.SweepUploads(ctx, cutoff)
	out.Uploads = n
	if err != nil {
		return out, err
	}
	cursor := ""
	for {
		page, next, err := blobs.ListBlobs(ctx, cutoff, cursor, blobSweepPage)
		if err != nil {
			return out, err
		}
		for _, b := range page {
			del := func(ctx context.Context) (bool, error) { return blobs.DeleteBlob(ctx, b.Partition, b.BlobID, cutoff) }
			var deleted bool
			if guard, ok := e.cfg.Store.(store.BlobSweepGuard); ok {
				external := del
				if own, ok := e.cfg.Store.(store.BlobStorer); ok && own.BlobStore() == blobs {
					external = nil
				}
				deleted, err = guard.DeleteUnreferencedBlob(ctx, b.Partition, b.BlobID, cutoff, external)
			} else {
				// Without a guard a push that references the blob between
				// this check and the delete keeps a reference to deleted
				// bytes.
				var refs []store.BlobRef
				if refs, err = idx.BlobRefs(ctx, b.Partition, b.BlobID, nil, 1); err == nil && len(refs) == 0 {
					deleted, err = del(ctx)
				}
			}
			if err != nil {
				return out, err
			}
			if deleted {
				out.Blobs++
				out.Bytes += b.ByteLength
			}
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// RunBlobSweeps sweeps the blob store every interval until ctx ends.
// Failures are logged and retried next round.
func (e *Engine) RunBlobSweeps(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sw, err := e.SweepBlobs(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.cfg.Logger.WarnContext(ctx, "blob sweep failed", "err", err)
		case sw.Blobs > 0 || sw.Uploads > 0:
			e.cfg.Logger.InfoContext(ctx, "blobs swept", "blobs", sw.Blobs, "bytes", sw.Bytes, "uploads", sw.Uploads)
		}
	}
}
