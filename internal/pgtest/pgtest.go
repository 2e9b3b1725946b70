// Package pgtest gives tests a Postgres of their own: the test database
// named by SYNCGO_TEST_POSTGRES_URL, and a fresh schema in it per test,
// selected through the connections' search_path and dropped at cleanup.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Env names the URL of the test database.
const Env = "SYNCGO_TEST_POSTGRES_URL"

// URL returns the test database's URL. Without it the test skips with one
// visible line, except under CI=true, where the Postgres tests are
// required and it fails.
func URL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(Env)
	if base == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set; CI=true requires the Postgres tests", Env)
		}
		noticeSkip()
		tb.Skipf("%s is not set: skipping the Postgres run (e.g. %s='postgres://postgres@127.0.0.1:5432/syncgo_test?sslmode=disable')", Env, Env)
	}
	return base
}

// Schema creates a schema named prefix_<random> in the test database,
// dropped at cleanup (kept, and named in the log, when the test failed
// and keep is set), and returns the URL that selects it.
func Schema(tb testing.TB, prefix string, keep bool) string {
	tb.Helper()
	base := URL(tb)
	name := randomName(prefix)
	Exec(tb, base, "CREATE SCHEMA "+name)
	tb.Cleanup(func() {
		if keep && tb.Failed() {
			tb.Logf("kept Postgres schema %s for inspection", name)
			return
		}
		Exec(tb, base, "DROP SCHEMA "+name+" CASCADE")
	})
	return WithSearchPath(tb, base, name)
}

// randomName is prefix_ and 12 random hex digits: a schema or database
// name no other test run uses.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// WithSearchPath returns base with its search_path set to schema.
func WithSearchPath(tb testing.TB, base, schema string) string {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Exec runs one statement on its own connection to dsn.
func Exec(tb testing.TB, dsn, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("connect to %s: %v", Env, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// noticeSkip tells the developer at the terminal, once per go test run,
// that the Postgres tests are skipped: go test shows a passing package's
// output (its skips included) only with -v, so the line goes to the
// controlling terminal, when there is one. The test binaries of one run
// are children of one go command: a marker file named after it makes the
// line appear once, whichever package skips first.
func noticeSkip() {
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("syncgo-pgtest-skip-%d", os.Getppid()))
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // told already in this run, or no temp dir
	}
	f.Close()
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return // no terminal (CI sets the variable anyway)
	}
	defer tty.Close()
	fmt.Fprintf(tty, "syncgo: %s is not set: the Postgres tests are skipped (README, \"Tests\")\n", Env)
}

// RefuseDials wraps cfg's dialer so that, once the returned switch is on,
// every new connection is refused as a down server refuses it (a test
// of what the store does when it cannot reconnect).
func RefuseDials(cfg *pgconn.Config) *atomic.Bool {
	refuse := new(atomic.Bool)
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (test)")}
		}
		return dial(ctx, network, addr)
	}
	return refuse
}

// KillOnCommitLog creates, in schema, a trigger named name on the commit
// log (sync_commits) whose backend terminates itself when the SQL
// condition when holds for the appended row (NEW): before the append, or,
// with atCommit, at the COMMIT (a deferred constraint trigger), whose
// outcome the client then does not learn. The sequence schema.kills
// exists for when to count with (nextval('schema.kills')).
func KillOnCommitLog(tb testing.TB, dsn, schema, name, when string, atCommit bool) {
	tb.Helper()
	Exec(tb, dsn, "CREATE SEQUENCE IF NOT EXISTS "+schema+".kills")
	ret := "NEW"
	if atCommit {
		ret = "NULL"
	}
	Exec(tb, dsn, `CREATE FUNCTION `+schema+`.`+name+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF `+when+` THEN
    PERFORM pg_terminate_backend(pg_backend_pid());
    PERFORM pg_sleep(5); -- the termination ends the backend here
  END IF;
  RETURN `+ret+`;
END $$`)
	if atCommit {
		Exec(tb, dsn, `CREATE CONSTRAINT TRIGGER `+name+` AFTER INSERT ON `+schema+`.sync_commits
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+schema+`.`+name+`()`)
		return
	}
	Exec(tb, dsn, `CREATE TRIGGER `+name+` BEFORE INSERT ON `+schema+`.sync_commits FOR EACH ROW EXECUTE FUNCTION `+schema+`.`+name+`()`)
}
