package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/wire"
)

// fullTablespace creates a tablespace on a small tmpfs of its own (dir), so
// that what is written into it fills a real disk. It skips, visibly,
// where that cannot be made: not root, no mount, or a Postgres server
// that is not on this machine.
func fullTablespace(tb testing.TB, size string) (name, dir string) {
	tb.Helper()
	url := testURL(tb)
	if os.Geteuid() != 0 {
		tb.Skip("a full disk needs a tmpfs mount, which needs root: skipping the real disk-full test")
	}
	if !strings.Contains(url, "127.0.0.1") && !strings.Contains(url, "localhost") && !strings.Contains(url, "host=/") {
		tb.Skip("the Postgres server is not on this machine: skipping the real disk-full test")
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		tb.Skipf("no postgres user on this machine (%v): skipping the real disk-full test", err)
	}
	// Not a t.TempDir: the directory must outlive a tablespace that could
	// not be dropped (a server whose tablespace files vanish panics at its
	// next checkpoint), so it is removed only after the drop.
	base, err := os.MkdirTemp("", "syncgo-diskfull-")
	if err != nil {
		tb.Fatal(err)
	}
	dir = filepath.Join(base, "full")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		_ = os.RemoveAll(base)
		tb.Skipf("mount tmpfs: %v %s: skipping the real disk-full test", err, out)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name = "syncgo_full_" + hex.EncodeToString(b[:])
	dropped := false
	tb.Cleanup(func() {
		if !dropped {
			tb.Errorf("tablespace %s was not dropped: %s stays mounted so that the server keeps its files; "+
				"drop the tablespace, then umount and remove it", name, dir)
			return
		}
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v %s", dir, err, out)
			return
		}
		_ = os.RemoveAll(base)
	})
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		tb.Fatal(err)
	}
	// The server walks into the tablespace's directory.
	if err := os.Chmod(base, 0o711); err != nil {
		tb.Fatal(err)
	}
	admin(tb, url, fmt.Sprintf("CREATE TABLESPACE %s LOCATION '%s'", name, dir))
	// Registered after the unmount's cleanup, so run before it (and after
	// the schema's drop, registered later). A checkpoint first: the drop
	// needs the files of dropped relations gone, which a checkpoint does;
	// on a loaded machine it can take long, hence the generous bound.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop tablespace %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			tb.Errorf("checkpoint before dropping tablespace %s: %v", name, err)
			return
		}
		if _, err := conn.Exec(ctx, "DROP TABLESPACE IF EXISTS "+name); err != nil {
			tb.Errorf("drop tablespace %s: %v", name, err)
			return
		}
		dropped = true
	})
	return name, dir
}

// On a real full disk (the tables' tablespace on a full tmpfs), writes
// fail with store.ErrStorageFull, which the engine answers with a
// retryable error while it keeps serving reads; reads go on, nothing of
// the failed writes is visible, and writing works again once space is
// freed (issue 15, finding 10, on Postgres).
func TestDiskFullIsStorageFull(t *testing.T) {
	ts, dir := fullTablespace(t, "3m")
	schemaName := newSchema(t)
	// The schema is dropped before the tablespace (cleanups run last
	// registered first); every relation of the store is created in it.
	pcfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schemaName
	pcfg.ConnConfig.RuntimeParams["default_tablespace"] = ts
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg := Config{Pool: pool}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := testSchema(t, 1)
	ensure(t, s, c)
	ctx := context.Background()
	if _, err := s.TouchPartition(ctx, "p", 1, "epoch-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BindClient(ctx, "p", store.ClientRecord{ClientID: "c-before", ActorID: "a", Cursor: -1, UpdatedAtMs: 1}); err != nil {
		t.Fatal(err)
	}
	first := task{id: "t-first", project: "p1", owner: "o"}.write(t, c, 1)
	apply(t, s, "p", first)

	// Fill the disk with large rows until a write fails.
	// Random bytes in the unindexed bytes column, which compression
	// cannot shrink.
	raw := make([]byte, 256<<10)
	var writeErr error
	written := 0
	for i := 0; i < 200 && writeErr == nil; i++ {
		_, _ = rand.Read(raw)
		w := bigTask(t, c, fmt.Sprintf("t%03d", i), raw)
		writeErr = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			_, err := tx.AppendCommit(ctx, commitOf(w.RowID, upsertChange(w)))
			return err
		})
		if writeErr == nil {
			written++
		}
	}
	if writeErr == nil {
		t.Fatal("200 writes of 256 KiB fitted on a 3 MiB tablespace")
	}
	if !errors.Is(writeErr, store.ErrStorageFull) {
		t.Fatalf("a write on a full disk: %v; want store.ErrStorageFull", writeErr)
	}
	t.Logf("%d large writes fitted; then: %v", written, writeErr)

	// Reads go on.
	part, err := s.Partition(ctx, "p")
	if err != nil {
		t.Fatalf("Partition on a full disk: %v", err)
	}
	if want := int64(1 + written); part.MaxCommitSeq != want {
		t.Fatalf("head %d; want %d (the failed write appended nothing)", part.MaxCommitSeq, want)
	}
	rows, err := s.ListRows(ctx, "p", "tasks", nil, 1000)
	if err != nil {
		t.Fatalf("ListRows on a full disk: %v", err)
	}
	if len(rows) != 1+written {
		t.Fatalf("%d rows; want %d", len(rows), 1+written)
	}
	if _, err := s.Client(ctx, "p", "c-before"); err != nil {
		t.Fatalf("Client on a full disk: %v", err)
	}
	if _, err := s.ReadCommits(ctx, "p", 0, part.MaxCommitSeq, 10); err != nil {
		t.Fatalf("ReadCommits on a full disk: %v", err)
	}
	// The other writes of the request path fail the same way, or fit.
	for i := 0; i < 50; i++ {
		_, err := s.BindClient(ctx, "p", store.ClientRecord{ClientID: fmt.Sprintf("c-%d-%s", i, strings.Repeat("c", 2000)), ActorID: "a", Cursor: -1, UpdatedAtMs: 2})
		if err != nil {
			if !errors.Is(err, store.ErrStorageFull) {
				t.Fatalf("BindClient on a full disk: %v; want store.ErrStorageFull", err)
			}
			break
		}
	}

	// Space added (the tmpfs grown in place): writing works again.
	if out, err := exec.Command("mount", "-o", "remount,size=64m", dir).CombinedOutput(); err != nil {
		t.Fatalf("grow the tmpfs: %v %s", err, out)
	}
	after := task{id: "t-after", project: "p1", owner: "o"}.write(t, c, 1)
	apply(t, s, "p", after)
}

// bigTask is a task row whose bytes column holds data.
func bigTask(tb testing.TB, c *schema.Compiled, id string, data []byte) store.RowWrite {
	tb.Helper()
	w := task{id: id, project: "p1", owner: "o"}.write(tb, c, 1)
	t, _ := c.Table("tasks")
	vals, err := t.RowCodec().DecodeRow(w.Payload)
	if err != nil {
		tb.Fatal(err)
	}
	vals[8] = wire.Value{Bytes: data}
	if w.Payload, err = t.RowCodec().AppendRow(nil, vals); err != nil {
		tb.Fatal(err)
	}
	return w
}
