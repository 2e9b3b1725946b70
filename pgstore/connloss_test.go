package pgstore

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/store"
)

// Lost connections (retry.go): the backends are terminated for real, by
// pg_terminate_backend from another connection or from the backend
// itself, as a failover or a Postgres restart does.

// openLossy opens a store from a URL (its own pool) on the schema, with
// connections named app, so that a test terminates only its own.
func openLossy(t *testing.T, schemaName, app string) *Store {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schemaName)
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s, err := Open(context.Background(), Config{URL: u.String(), MaxConns: 6})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// terminate ends the backends that sql selects (a query of pids) and
// waits until they are gone.
func terminate(t *testing.T, pids string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `WITH p AS MATERIALIZED (`+pids+`) SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM p) x`, args...).Scan(&n); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	for {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid IN (`+pids+`) AND pid <> pg_backend_pid()`, args...).Scan(&left); err != nil {
			t.Fatalf("terminate: %v", err)
		}
		if left == 0 {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d terminated backends still there", left)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// commitCount counts the log's commits of a client commit id.
func commitCount(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	return queryInt(t, s, `SELECT count(*) FROM sync_commits WHERE client_commit_id = $1`, id)
}

// TestWriteRetriedAfterConnectionLost: the backend of a Write's
// transaction is terminated before its COMMIT: after the transaction's
// first round trip (the next statement finds the connection lost), or
// after the function queued its writes (they go out with the COMMIT, and
// the server's answer to the first of them is that it ended the session,
// so the COMMIT behind it never ran). Nothing was written; the Write runs
// again on another connection and commits once, and the caller sees no
// error. These Writes have no journal key: only a COMMIT known not to
// have run lets them run again.
func TestWriteRetriedAfterConnectionLost(t *testing.T) {
	t.Parallel()
	for _, killAfter := range []string{"first round trip", "writes queued"} {
		t.Run(killAfter, func(t *testing.T) {
			t.Parallel()
			s := openLossy(t, newSchema(t), uniq("h87-loss-"))
			c := testSchema(t, 1)
			ensure(t, s, c)
			w := task{id: "t1", project: "p1", owner: "o"}.write(t, c, 1)
			kill := func(tx store.WriteTx) {
				terminate(t, `SELECT $1::int AS pid`, tx.(*writeTx).b.conn.Conn().PgConn().PID())
			}
			runs := 0
			var seq int64
			err := s.Write(context.Background(), "p", func(ctx context.Context, tx store.WriteTx) error {
				runs++
				if _, err := tx.Row(ctx, "tasks", "t1"); !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if runs == 1 && killAfter == "first round trip" {
					kill(tx)
				}
				if err := tx.UpsertRow(ctx, w); err != nil {
					return err
				}
				var err error
				if seq, err = tx.AppendCommit(ctx, commitOf("lost-before-commit", upsertChange(w))); err != nil {
					return err
				}
				if runs == 1 && killAfter == "writes queued" {
					kill(tx)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if runs != 2 {
				t.Errorf("the function ran %d times; want 2 (once more after the lost connection)", runs)
			}
			if n := commitCount(t, s, "lost-before-commit"); n != 1 || seq != 1 {
				t.Errorf("the log holds the commit %d times, at seq %d; want once, at 1", n, seq)
			}
			if _, err := s.Row(context.Background(), "p", "tasks", "t1"); err != nil {
				t.Errorf("Row: %v", err)
			}
			if n := s.Stats().ConnRetries; n != 1 {
				t.Errorf("Stats().ConnRetries = %d; want 1", n)
			}
		})
	}
}

// TestWriteLostDuringCommit: the backend dies while it runs the COMMIT
// (a deferred constraint trigger of the test's schema terminates its own
// backend once, at COMMIT time), so the caller cannot know whether the
// transaction committed. A Write keyed in the push-result journal
// (WriteReadAhead with its ClientCommitID) runs again: its function
// re-checks the journal, so a commit that did commit is answered from it
// and one that did not is applied once. Any other Write fails with the
// lost connection: running it again could apply it twice.
func TestWriteLostDuringCommit(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	base := testURL(t)
	s := openLossy(t, name, uniq("h87-commit-"))
	c := testSchema(t, 1)
	ensure(t, s, c)
	pgtest.KillOnCommitLog(t, base, name, "kill_at_commit", "NEW.client_commit_id LIKE 'kill-%' AND nextval('"+name+".kills') % 2 = 1", true)

	// push is a Write as the engine's push makes it: the journal
	// re-check, then the append and its journal record.
	push := func(id string, journaled bool) (runs int, replayed bool, err error) {
		w := task{id: id, project: "p1", owner: "o"}.write(t, c, 1)
		fn := func(ctx context.Context, tx store.WriteTx) error {
			runs++
			replayed = false
			if _, err := tx.PushResult(ctx, "c1", id); err == nil {
				replayed = true
				return nil
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if err := tx.UpsertRow(ctx, w); err != nil {
				return err
			}
			seq, err := tx.AppendCommit(ctx, commitOf(id, upsertChange(w)))
			if err != nil {
				return err
			}
			_, err = tx.PutPushResult(ctx, "c1", id, store.PushRecord{Status: 1, CommitSeq: seq})
			return err
		}
		if journaled {
			err = s.WriteReadAhead(context.Background(), "p", store.WriteReads{ClientID: "c1", ClientCommitID: id}, fn)
		} else {
			err = s.Write(context.Background(), "p", fn)
		}
		return runs, replayed, err
	}

	runs, replayed, err := push("kill-journaled", true)
	if err != nil {
		t.Fatalf("journaled Write: %v", err)
	}
	if runs != 2 || replayed {
		t.Errorf("journaled Write: ran %d times, replayed %v; want 2 runs, the second applying (the COMMIT did not happen)", runs, replayed)
	}
	if n := commitCount(t, s, "kill-journaled"); n != 1 {
		t.Errorf("the log holds the journaled commit %d times; want 1", n)
	}
	// Run again, the journaled Write is answered from the journal.
	if runs, replayed, err = push("kill-journaled", true); err != nil || runs != 1 || !replayed {
		t.Errorf("journaled Write again: ran %d times, replayed %v, err %v; want 1 run answered from the journal", runs, replayed, err)
	}

	runs, _, err = push("kill-plain", false)
	if err == nil || !connLost(err) {
		t.Errorf("plain Write lost during COMMIT: err %v; want the lost connection", err)
	}
	if runs != 1 {
		t.Errorf("plain Write lost during COMMIT ran %d times; want 1", runs)
	}
	if n := commitCount(t, s, "kill-plain"); n != 0 {
		t.Errorf("the log holds the plain commit %d times; want 0 (its COMMIT did not happen)", n)
	}
}

// TestIdleConnectionsTerminated: every connection of the store's pool is
// terminated while idle, as a Postgres restart does. The next read and
// the next Write each succeed, on the first call.
func TestIdleConnectionsTerminated(t *testing.T) {
	t.Parallel()
	app := uniq("h87-idle-")
	s := openLossy(t, newSchema(t), app)
	c := testSchema(t, 1)
	ensure(t, s, c)
	applyTask(t, s, "p", "t0")
	// Several connections open and idle.
	ctx := context.Background()
	var conns []*pgxpool.Conn
	for range 4 {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	for _, conn := range conns {
		conn.Release()
	}
	if n := terminate(t, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app); n < 4 {
		t.Fatalf("terminated %d backends; want at least 4", n)
	}
	if _, err := s.ReadCommits(ctx, "p", 0, 10, 10); err != nil {
		t.Errorf("ReadCommits after the restart: %v", err)
	}
	applyTask(t, s, "p", "t1") // fails the test on an error
	if n := s.Stats().ConnRetries; n < 1 {
		t.Errorf("Stats().ConnRetries = %d; want at least 1", n)
	}
}

// TestReadRetryFails: the connections are lost and no new one can be
// made. A read tries a bounded number of times and fails with the lost
// connection, at once, not after its context's deadline.
func TestReadRetryFails(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	app := uniq("h87-refused-")
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	refuse := pgtest.RefuseDials(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := Open(context.Background(), Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ensure(t, s, testSchema(t, 1))
	refuse.Store(true)
	terminate(t, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = s.ReadCommits(ctx, "p", 0, 10, 10)
	if err == nil || !connLost(err) {
		t.Fatalf("ReadCommits = %v; want the lost connection", err)
	}
	if ctx.Err() != nil {
		t.Errorf("ReadCommits returned at its context's deadline: %v", err)
	}
	if n := s.Stats().ConnRetries; n != maxConnRetries {
		t.Errorf("Stats().ConnRetries = %d; want %d", n, maxConnRetries)
	}
}

// TestConnectionLostThroughPooler: through a PgBouncer in transaction
// mode, the pooler's server connections are terminated (a Postgres
// restart behind the pooler). The pooler answers the next statement on
// each of them with a connection error, or finds them dead itself; the
// next read and Write still succeed on the first call. A Write whose
// server connection is terminated mid-transaction gets the pooler's
// connection error (class 08) and runs again.
func TestConnectionLostThroughPooler(t *testing.T) {
	db := pgtest.Database(t, "h87_pooler")
	via := pgtest.Bouncer(t, db, "transaction", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Open(ctx, Config{URL: via, MaxConns: 4})
	if err != nil {
		t.Fatalf("Open through the pooler: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ensure(t, s, testSchema(t, 1))
	applyTask(t, s, "p", "t0")
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if n := terminate(t, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, dbName); n < 1 {
		t.Fatalf("terminated %d server connections of the pooler; want its pool's", n)
	}
	if _, err := s.ReadCommits(ctx, "p", 0, 10, 10); err != nil {
		t.Errorf("ReadCommits after the restart behind the pooler: %v", err)
	}
	applyTask(t, s, "p", "t1")

	// The server connection of a transaction in progress: the pooler
	// answers the transaction's next statement with a connection error.
	c := testSchema(t, 1)
	w := task{id: "t2", project: "p1", owner: "o"}.write(t, c, 1)
	runs := 0
	err = s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
		runs++
		if _, err := tx.Row(ctx, "tasks", "t2"); !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if runs == 1 {
			terminate(t, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND state = 'idle in transaction'`, dbName)
		}
		if err := tx.UpsertRow(ctx, w); err != nil {
			return err
		}
		_, err := tx.AppendCommit(ctx, commitOf("through-pooler", upsertChange(w)))
		return err
	})
	if err != nil {
		t.Fatalf("Write whose server connection was lost behind the pooler: %v", err)
	}
	if runs != 2 {
		t.Errorf("the function ran %d times; want 2", runs)
	}
	if n := commitCount(t, s, "through-pooler"); n != 1 {
		t.Errorf("the log holds the commit %d times; want 1", n)
	}
}
