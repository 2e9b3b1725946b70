package blobfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.RunBlobStore(t, func(tb testing.TB) (store.BlobStore, func(testing.TB) store.BlobStore) {
		dir := tb.TempDir()
		s, err := Open(dir)
		if err != nil {
			tb.Fatal(err)
		}
		return s, func(tb testing.TB) store.BlobStore {
			o, err := Open(dir)
			if err != nil {
				tb.Fatal(err)
			}
			return o
		}
	})
}

// A staging file an interrupted upload left is swept by its start time;
// ids that are not content addresses never become paths.
func TestSweepAndPaths(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"upload-100-aa", "upload-900-bb", "unrelated"} {
		if err := os.WriteFile(filepath.Join(dir, "tmp", name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.SweepUploads(ctx, 500); err != nil || n != 1 {
		t.Fatalf("SweepUploads(500) = %d, %v; want 1", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp", "upload-900-bb")); err != nil {
		t.Fatal("a newer upload was swept")
	}
	for _, id := range []string{"../../etc/passwd", "sha256:" + strings.Repeat("A", 64), "sha256:../" + strings.Repeat("0", 61)} {
		if err := s.PutBlob(ctx, "p", id, "", bytes.NewReader(nil), 1); err == nil {
			t.Fatalf("PutBlob accepted the id %q", id)
		}
		if _, err := s.StatBlob(ctx, "p", id); err == nil {
			t.Fatalf("StatBlob accepted the id %q", id)
		}
	}
	// Any partition name is a safe directory.
	id := "sha256:" + strings.Repeat("0", 64)
	if err := s.PutBlob(ctx, "../../x\x00/y", id, "", bytes.NewReader([]byte("z")), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "x")); err == nil {
		t.Fatal("a partition name escaped the root")
	}
}
