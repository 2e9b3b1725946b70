package pgstore

import (
	"context"
	"strings"
	"testing"
)

// The sweep skips a blob whose lock a push holds (its transaction checked
// that the blob exists and may reference it), and deletes it once that
// transaction ended without a reference.
func TestSweepSkipsLockedBlob(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const id = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	if err := s.BlobStore().PutBlob(ctx, "p", id, "", strings.NewReader("x"), 1000); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlLockBlobShared, "p", id); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteUnreferencedBlob(ctx, "p", id, 2000, nil); err != nil || deleted {
		t.Fatalf("sweep while a push holds the blob's lock: deleted %v, %v; want skipped", deleted, err)
	}
	if _, err := s.BlobStore().StatBlob(ctx, "p", id); err != nil {
		t.Fatalf("the blob is gone: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteUnreferencedBlob(ctx, "p", id, 2000, nil); err != nil || !deleted {
		t.Fatalf("sweep after the push ended: deleted %v, %v; want deleted", deleted, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM sync_blob_objects").Scan(&n); err != nil || n != 0 {
		t.Fatalf("blob objects after the sweep: %d, %v", n, err)
	}
}
