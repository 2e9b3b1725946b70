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
	"github.com/syncgo/syncgo/store"
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
// younger one stays. Then the prune's position survives a crash: with
// 30,000 more (young) records, the process is killed in the middle of a
// lap, and the restarted one goes on from the stored position instead of
// the journal's start (the rows it counts into the lap stay the rows up
// to its position).
func TestBinaryRetentionPushResults(t *testing.T) {
	bin := binarytest.Build(t)
	for _, d := range []struct {
		name string
		open func(t *testing.T) (db string, query func(sql string, args []any, dest ...any) bool)
	}{
		{"sqlite", func(t *testing.T) (string, func(string, []any, ...any) bool) {
			db := filepath.Join(t.TempDir(), "r.db")
			return db, func(q string, args []any, dest ...any) bool {
				conn, err := sqlite.OpenConn(db, sqlite.OpenReadWrite)
				must(t, err)
				defer conn.Close()
				conn.SetBusyTimeout(10 * time.Second)
				found := false
				must(t, sqlitex.Execute(conn, q, &sqlitex.ExecOptions{Args: args,
					ResultFunc: func(stmt *sqlite.Stmt) error {
						found = true
						for i, d := range dest {
							switch d := d.(type) {
							case *int64:
								*d = stmt.ColumnInt64(i)
							case *string:
								*d = stmt.ColumnText(i)
							default:
								return fmt.Errorf("cannot scan into %T", d)
							}
						}
						return nil
					}}))
				return found
			}
		}},
		{"postgres", func(t *testing.T) (string, func(string, []any, ...any) bool) {
			url := pgtest.Schema(t, "retention_journal", false)
			return url, func(q string, args []any, dest ...any) bool {
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, url)
				must(t, err)
				defer conn.Close(ctx)
				rows, err := conn.Query(ctx, q, args...)
				must(t, err)
				defer rows.Close()
				found := false
				for rows.Next() {
					found = true
					if len(dest) > 0 {
						must(t, rows.Scan(dest...))
					}
				}
				must(t, rows.Err())
				return found
			}
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			db, query := d.open(t)
			exec := func(q string, args ...any) int64 {
				var n int64
				if !query(q, args, &n) {
					return 0
				}
				return n
			}
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

			// The position across a crash.
			const bulk = 30_000
			young := fmt.Sprintf(`{"status":"applied","commitSeq":1,"recordedAtMs":%d,"results":[]}`, time.Now().UnixMilli())
			if d.name == "sqlite" {
				exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < ?)
INSERT INTO sync_push_results(partition, client_id, client_commit_id, result) SELECT 'bulk', 'c', printf('cc-%06d', i), ? FROM n`, bulk-1, young)
			} else {
				exec(`INSERT INTO sync_push_results(partition, client_id, client_commit_id, result)
SELECT 'bulk', 'c', 'cc-' || lpad(i::text, 6, '0'), $2::jsonb FROM generate_series(0, $1::int) i`, bulk-1, young)
			}
			type position struct {
				stored         bool
				after          *store.PushResultKey
				laps, examined int64
			}
			read := func() position {
				var (
					pos  position
					name string
				)
				pos.stored = query(`SELECT name, watermark, observed_rows FROM sync_backfill_checkpoints
WHERE partition = '' AND (name = 'syncgo.push_results_prune' OR substr(name, 1, 26) = 'syncgo.push_results_prune:')`, nil, &name, &pos.laps, &pos.examined)
				if pos.stored {
					var ok bool
					if pos.after, ok = store.DecodePushResultsPosition(name); !ok {
						t.Fatalf("stored position %q does not decode", name)
					}
				}
				return pos
			}
			// upTo counts the journal rows up to k: those a lap has read
			// when its position is k.
			upTo := func(k *store.PushResultKey) int64 {
				if d.name == "sqlite" {
					return exec(`SELECT count(*) FROM sync_push_results WHERE (partition, client_id, client_commit_id) <= (?, ?, ?)`, k.Partition, k.ClientID, k.ClientCommitID)
				}
				return exec(`SELECT count(*) FROM sync_push_results WHERE (partition, client_id, client_commit_id) <= ($1, $2, $3)`, k.Partition, k.ClientID, k.ClientCommitID)
			}
			start := read()
			if !start.stored {
				t.Fatalf("no push-result prune position stored in sync_backfill_checkpoints after the rounds ran")
			}
			// Kill the process in a lap begun after the bulk insert, before
			// a third of it.
			var before position
			deadline := time.Now().Add(60 * time.Second)
			for {
				before = read()
				if before.laps > start.laps && before.after != nil && before.examined <= bulk/3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the prune did not stop within the first third of a lap in 60 s (last position %+v)", before)
				}
				time.Sleep(time.Millisecond)
			}
			must(t, p.Cmd.Process.Kill())
			<-p.Exited()
			before = read()
			if before.after == nil || before.examined != upTo(before.after) {
				t.Fatalf("position at the kill: %+v, after %v; want one inside the journal, with the rows up to it counted", before, before.after)
			}
			binarytest.Serve(t, bin, binarytest.Options{Dir: dir, Name: "restarted syncgo serve"}, "-config", cfgPath)
			var next position
			deadline = time.Now().Add(60 * time.Second)
			for {
				next = read()
				if next.laps != before.laps || next.after == nil || *next.after != *before.after {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the restarted process did not move the position in 60 s: %+v", next)
				}
				time.Sleep(time.Millisecond)
			}
			// A walk from the journal's start would stand before the killed
			// one's position, or count rows it has not read.
			if next.laps != before.laps || next.after == nil || upTo(next.after) <= before.examined || next.examined != upTo(next.after) {
				var rows int64
				if next.after != nil {
					rows = upTo(next.after)
				}
				t.Fatalf("after the restart, the position went from %v (lap %d, %d rows) to %v (lap %d, %d rows, %d rows up to it); "+
					"want it further in the same lap, the rows before it all counted", before.after, before.laps, before.examined,
					next.after, next.laps, next.examined, rows)
			}
			t.Logf("killed at %v (lap %d, %d rows); the restarted process's first position stored: %v (lap %d, %d rows)",
				before.after, before.laps, before.examined, next.after, next.laps, next.examined)
			if n := exec(count); n != bulk+1 {
				t.Fatalf("%d journal records; want %d (nothing young pruned)", n, bulk+1)
			}
		})
	}
}
