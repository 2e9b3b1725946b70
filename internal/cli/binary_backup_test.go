package cli_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// The live SQLite backup of docs/deployment.md, run against `syncgo
// serve` while clients push: the copy (VACUUM INTO on a connection of
// another process) passes integrity_check, holds a dense commit log and
// every row whose push was acknowledged before the copy began; the
// restore procedure (stop, replace the file, `syncgo epoch rotate`,
// start) sends a client that was ahead of the backup through a reset, after
// which it holds exactly the backup's rows.
func TestBinarySQLiteLiveBackupRestore(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "syncgo.db")
	backup := filepath.Join(dir, "backup.db")
	demo, err := os.ReadFile("demo_schema.json")
	must(t, err)
	parsed, err := schema.ParseJSON(demo)
	must(t, err)
	sc, err := schema.Compile(parsed)
	must(t, err)
	// A fixed port: the client that was ahead meets the restored server
	// at the same URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	must(t, ln.Close())
	args := []string{"-listen", addr, "-db", db}
	p := binarytest.Serve(t, bin, binarytest.Options{}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Writers push one row per commit until told to stop; each row's
	// acknowledgement time is recorded.
	var (
		mu    sync.Mutex
		acked = map[string]time.Time{}
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		errs  = make(chan error, 4)
	)
	for w := range 4 {
		c, err := sspclient.New(p.URL, fmt.Sprintf("writer-%d", w), sc, sspclient.Options{})
		must(t, err)
		if _, err := c.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%05d", w, i)
				commit, err := c.Upsert("tasks", map[string]any{"id": id, "project_id": "p1", "title": id, "done": false, "notes": nil})
				if err == nil {
					_, err = c.Push(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				if o, ok := c.Outcome(commit); !ok || o.Status != wire.PushApplied {
					errs <- fmt.Errorf("commit %s: %+v", commit, o)
					return
				}
				mu.Lock()
				acked[id] = time.Now()
				mu.Unlock()
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	began := time.Now()
	conn, err := sqlite.OpenConn(db, sqlite.OpenReadWrite)
	must(t, err)
	conn.SetBusyTimeout(5 * time.Second)
	must(t, sqlitex.ExecuteTransient(conn, "VACUUM INTO '"+backup+"'", nil))
	conn.Close()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a writer failed: %v", err)
	default:
	}

	// A client that synced everything: it is ahead of the backup.
	ahead, err := sspclient.New(p.URL, "reader", sc, sspclient.Options{})
	must(t, err)
	must(t, ahead.Subscribe("all", "tasks", map[string][]string{"project_id": {"p1"}}))
	if _, err := ahead.SyncUntilQuiet(ctx, 0); err != nil {
		t.Fatal(err)
	}
	oldEpoch, _ := ahead.LogEpoch()
	if len(ahead.Rows("tasks")) != len(acked) {
		t.Fatalf("the reader holds %d rows; %d were acknowledged", len(ahead.Rows("tasks")), len(acked))
	}

	// The backup: intact, a dense log, every row acknowledged before it began.
	bc, err := sqlite.OpenConn(backup, sqlite.OpenReadOnly)
	must(t, err)
	queryText := func(q string) []string {
		var out []string
		must(t, sqlitex.ExecuteTransient(bc, q, &sqlitex.ExecOptions{ResultFunc: func(st *sqlite.Stmt) error {
			out = append(out, st.ColumnText(0))
			return nil
		}}))
		return out
	}
	if got := queryText("PRAGMA integrity_check"); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("integrity_check of the backup: %v", got)
	}
	if got := queryText("SELECT count(*) = max(commit_seq) AND min(commit_seq) = 1 FROM sync_commits"); got[0] != "1" {
		t.Fatalf("the backup's commit log is not dense: %v", queryText("SELECT count(*) || ' ' || min(commit_seq) || ' ' || max(commit_seq) FROM sync_commits"))
	}
	inBackup := map[string]bool{}
	for _, id := range queryText(`SELECT "id" FROM tasks`) {
		inBackup[id] = true
	}
	bc.Close()
	before, after := 0, 0
	for id, at := range acked {
		if at.Before(began) {
			before++
			if !inBackup[id] {
				t.Errorf("row %s, acknowledged before the backup began, is not in it", id)
			}
		}
	}
	after = len(acked) - len(inBackup)
	if before == 0 || after <= 0 {
		t.Fatalf("%d rows acknowledged before the backup, %d after it: the writes did not overlap the backup", before, after)
	}
	t.Logf("%d rows acknowledged, %d before the backup began, %d in the backup", len(acked), before, len(inBackup))

	// Restore: stop, replace the file, rotate, start.
	p.Stop()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(backup)
	must(t, err)
	must(t, os.WriteFile(db, b, 0o600))
	out, errOut, code := binarytest.Run(t, bin, nil, "epoch", "rotate", "-db", db, "-yes")
	if code != 0 || !strings.Contains(out, `partition "default": log epoch `+oldEpoch+" -> ") {
		t.Fatalf("epoch rotate: exit %d\n%s%s", code, out, errOut)
	}
	binarytest.Serve(t, bin, binarytest.Options{}, args...)
	rounds, err := ahead.SyncUntilQuiet(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	reset := false
	for _, r := range rounds {
		reset = reset || r.EpochChanged
	}
	if !reset {
		t.Fatal("the client ahead of the backup was not reset")
	}
	got := ahead.Rows("tasks")
	if len(got) != len(inBackup) {
		t.Fatalf("after the restore the client holds %d rows; the backup has %d", len(got), len(inBackup))
	}
	for id := range got {
		if !inBackup[id] {
			t.Errorf("after the restore the client holds row %s, which the backup lacks", id)
		}
	}
}
