package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// The retention section of the config file reaches the server, on
// SQLite and on Postgres: with a short interval, a device that has been
// offline longer than the active window (400 h here, above the 14-day
// default) finds its cursor behind the pruned log (1,100 commits later,
// the newest 1,000 kept) and is answered reset (sync.cursor_expired),
// then bootstraps every row; one offline for 15 days, within the window,
// holds the log back and replays the commits it missed, as does the one
// offline for 17 days when pruning is off. config check shows the
// policy with its defaults and refuses values below the protocol's
// floors.
func TestBinaryRetention(t *testing.T) {
	bin := binarytest.Build(t)
	t.Run("sqlite", func(t *testing.T) {
		testBinaryRetention(t, bin, func(t *testing.T) (string, clientAger) {
			db := filepath.Join(t.TempDir(), "r.db")
			return db, func(clientID string, age time.Duration) time.Duration { return ageClient(t, db, clientID, age) }
		})
	})
	t.Run("postgres", func(t *testing.T) {
		testBinaryRetention(t, bin, func(t *testing.T) (string, clientAger) {
			url := pgtest.Schema(t, "retention", false)
			return url, func(clientID string, age time.Duration) time.Duration { return ageClientPG(t, url, clientID, age) }
		})
	})

	good := filepath.Join(t.TempDir(), "good.yaml")
	must(t, os.WriteFile(good, []byte("retention:\n  active_window: 400h\n"), 0o600))
	out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", good)
	if code != 0 || !strings.Contains(out, "retention: pruned every 1m0s; clients seen within 400h0m0s hold the log back, "+
		"commits older than 720h0m0s go regardless, the newest 1000 always kept") {
		t.Fatalf("config check of a retention section: exit %d: %s %s", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	must(t, os.WriteFile(bad, []byte("retention:\n  active_window: 24h\n  min_retained_commits: 10\n"), 0o600))
	_, errOut, code = binarytest.Run(t, bin, nil, "config", "check", bad)
	if code == 0 || !strings.Contains(errOut, "retention.active_window 24h0m0s is below the protocol's floor") ||
		!strings.Contains(errOut, "retention.min_retained_commits 10") {
		t.Fatalf("config check of retention below the floors: exit %d: %s", code, errOut)
	}
	must(t, os.WriteFile(good, []byte("retention:\n  active_window: 400h\n  push_results_max_age: 800h\n"), 0o600))
	out, errOut, code = binarytest.Run(t, bin, nil, "config", "check", good)
	if code != 0 || !strings.Contains(out, "the newest 1000 always kept; push results older than 800h0m0s pruned") {
		t.Fatalf("config check of push_results_max_age: exit %d: %s %s", code, out, errOut)
	}
	must(t, os.WriteFile(bad, []byte("retention:\n  active_window: 400h\n  push_results_max_age: 300h\n"), 0o600))
	_, errOut, code = binarytest.Run(t, bin, nil, "config", "check", bad)
	if code == 0 || !strings.Contains(errOut, "retention.push_results_max_age 300h0m0s is below retention.active_window 400h0m0s") {
		t.Fatalf("config check of push_results_max_age below the active window: exit %d: %s", code, errOut)
	}
}

// clientAger sets a client record's update time back by age (0: only
// reads it) and returns how old the record is then.
type clientAger func(clientID string, age time.Duration) time.Duration

func testBinaryRetention(t *testing.T, bin string, open func(t *testing.T) (db string, age clientAger)) {
	for _, tc := range []struct {
		name     string
		interval string
		offline  time.Duration
		reset    bool
	}{
		{"pruning", "100ms", 17 * 24 * time.Hour, true},
		{"window", "100ms", 15 * 24 * time.Hour, false},
		{"off", "-1s", 17 * 24 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, age := open(t)
			cfgPath := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ndb: %q\nretention:\n  interval: %s\n  active_window: 400h\n", db, tc.interval)), 0o600))
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", cfgPath)
			ctx := context.Background()
			sc := schemaDemo(t)

			device, err := sspclient.New(p.URL, "alice", sc, sspclient.Options{})
			must(t, err)
			must(t, device.Subscribe("tasks", "tasks", map[string][]string{"project_id": {"p1"}}))
			_, err = device.Upsert("tasks", map[string]any{"id": "t0", "project_id": "p1", "title": "first", "done": false, "notes": nil})
			must(t, err)
			_, err = device.SyncUntilQuiet(ctx, 10)
			must(t, err)
			// The device goes offline: its cursor record is made that old,
			// until no deferred write of the server's puts it back.
			eventually(t, "the device's record to be offline", func() bool {
				age(device.ClientID(), tc.offline)
				time.Sleep(100 * time.Millisecond)
				return age(device.ClientID(), 0) > tc.offline-time.Hour
			})

			writer, err := sspclient.New(p.URL, "bob", sc, sspclient.Options{})
			must(t, err)
			_, err = writer.Sync(ctx) // the log epoch; bob subscribes to nothing
			must(t, err)
			for i := range 1100 {
				_, err := writer.Upsert("tasks", map[string]any{"id": fmt.Sprintf("w%04d", i), "project_id": "p1", "title": "w", "done": false, "notes": nil})
				must(t, err)
			}
			for writer.Pending() > 0 {
				_, err := writer.Push(ctx)
				must(t, err)
			}
			// Pruned within a few intervals, if at all.
			time.Sleep(500 * time.Millisecond)
			res, err := device.Sync(ctx)
			must(t, err)
			if len(res.Sections) != 1 {
				t.Fatalf("sections %+v", res.Sections)
			}
			sec := res.Sections[0]
			if tc.reset {
				if sec.Status != wire.SubReset || sec.Reason != "sync.cursor_expired" {
					t.Fatalf("the offline device's round: status %v reason %q, want reset sync.cursor_expired", sec.Status, sec.Reason)
				}
			} else if sec.Status != wire.SubActive || sec.Commits == 0 {
				t.Fatalf("the offline device's round: status %v, %d commits, want active with the missed commits", sec.Status, sec.Commits)
			}
			_, err = device.SyncUntilQuiet(ctx, 50)
			must(t, err)
			if n := len(device.Rows("tasks")); n != 1101 {
				t.Fatalf("the device holds %d tasks, want 1101", n)
			}
		})
	}

}

// ageClient sets a client record's update time back by age (a device
// that has been offline that long), or only reads it when age is 0, and
// returns how old the record is then.
func ageClient(t *testing.T, db, clientID string, age time.Duration) time.Duration {
	t.Helper()
	conn, err := sqlite.OpenConn(db, sqlite.OpenReadWrite)
	must(t, err)
	defer conn.Close()
	conn.SetBusyTimeout(10 * time.Second)
	if age > 0 {
		must(t, sqlitex.Execute(conn, "UPDATE sync_clients SET updated_at_ms = ? WHERE client_id = ?",
			&sqlitex.ExecOptions{Args: []any{time.Now().Add(-age).UnixMilli(), clientID}}))
	}
	var at int64 = -1
	must(t, sqlitex.Execute(conn, "SELECT updated_at_ms FROM sync_clients WHERE client_id = ?", &sqlitex.ExecOptions{
		Args: []any{clientID}, ResultFunc: func(stmt *sqlite.Stmt) error { at = stmt.ColumnInt64(0); return nil }}))
	if at < 0 {
		return 0 // no record yet
	}
	return time.Since(time.UnixMilli(at))
}

// ageClientPG is ageClient on Postgres.
func ageClientPG(t *testing.T, url, clientID string, age time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	must(t, err)
	defer conn.Close(ctx)
	if age > 0 {
		_, err := conn.Exec(ctx, "UPDATE sync_clients SET updated_at_ms = $1 WHERE client_id = $2", time.Now().Add(-age).UnixMilli(), clientID)
		must(t, err)
	}
	var at int64
	if err := conn.QueryRow(ctx, "SELECT updated_at_ms FROM sync_clients WHERE client_id = $1", clientID).Scan(&at); err != nil {
		return 0 // no record yet
	}
	return time.Since(time.UnixMilli(at))
}

// retention.push_results_max_age reaches the server's retention rounds,
// on SQLite and on Postgres: a pushed commit's journal record, made 500 h
// old in the database, is deleted within a few intervals, while a
// younger one stays.
func TestBinaryRetentionPushResults(t *testing.T) {
	bin := binarytest.Build(t)
	for _, d := range []struct {
		name string
		open func(t *testing.T) (db string, exec func(sql string, args ...any) int64)
	}{
		{"sqlite", func(t *testing.T) (string, func(string, ...any) int64) {
			db := filepath.Join(t.TempDir(), "r.db")
			return db, func(q string, args ...any) int64 {
				conn, err := sqlite.OpenConn(db, sqlite.OpenReadWrite)
				must(t, err)
				defer conn.Close()
				conn.SetBusyTimeout(10 * time.Second)
				var n int64
				must(t, sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args,
					ResultFunc: func(stmt *sqlite.Stmt) error { n = stmt.ColumnInt64(0); return nil }}))
				return n
			}
		}},
		{"postgres", func(t *testing.T) (string, func(string, ...any) int64) {
			url := pgtest.Schema(t, "retention_journal", false)
			return url, func(q string, args ...any) int64 {
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, url)
				must(t, err)
				defer conn.Close(ctx)
				rows, err := conn.Query(ctx, q, args...)
				must(t, err)
				defer rows.Close()
				var n int64
				for rows.Next() {
					must(t, rows.Scan(&n))
				}
				must(t, rows.Err())
				return n
			}
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			db, exec := d.open(t)
			cfgPath := filepath.Join(dir, "syncgo.yaml")
			must(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ndb: %q\nretention:\n  interval: 100ms\n  push_results_max_age: 400h\n", db)), 0o600))
			p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-config", cfgPath)
			ctx := context.Background()
			device, err := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
			must(t, err)
			_, err = device.Sync(ctx) // the log epoch
			must(t, err)
			for _, id := range []string{"t-old", "t-young"} {
				_, err = device.Upsert("tasks", map[string]any{"id": id, "project_id": "p1", "title": "x", "done": false, "notes": nil})
				must(t, err)
				_, err = device.Push(ctx)
				must(t, err)
			}
			count := "SELECT count(*) FROM sync_push_results"
			if n := exec(count); n != 2 {
				t.Fatalf("%d journal records after two pushes; want 2", n)
			}
			old := time.Now().Add(-500 * time.Hour).UnixMilli()
			if d.name == "sqlite" {
				exec(`UPDATE sync_push_results SET result = json_set(result, '$.recordedAtMs', ?)
WHERE (partition, client_id, client_commit_id) = (SELECT partition, client_id, client_commit_id FROM sync_push_results ORDER BY json_extract(result, '$.recordedAtMs') LIMIT 1)`, old)
			} else {
				exec(`UPDATE sync_push_results SET result = jsonb_set(result, '{recordedAtMs}', to_jsonb($1::bigint))
WHERE (partition, client_id, client_commit_id) = (SELECT partition, client_id, client_commit_id FROM sync_push_results ORDER BY result->>'recordedAtMs' LIMIT 1)`, old)
			}
			eventually(t, "the old journal record to be pruned", func() bool {
				time.Sleep(100 * time.Millisecond)
				return exec(count) == 1
			})
			time.Sleep(300 * time.Millisecond)
			if n := exec(count); n != 1 {
				t.Fatalf("%d journal records after the prune; want 1 (the young one kept)", n)
			}
		})
	}
}
