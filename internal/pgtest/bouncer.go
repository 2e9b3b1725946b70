package pgtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
)

// Database creates a database named prefix_<random> on the test server,
// dropped at cleanup, and returns the URL that selects it. A pooler in
// front of Postgres passes no search_path, so a test through one gets a
// database of its own instead of a schema (Schema).
func Database(tb testing.TB, prefix string) string {
	tb.Helper()
	base := URL(tb)
	name := randomName(prefix)
	Exec(tb, base, "CREATE DATABASE "+name)
	tb.Cleanup(func() { Exec(tb, base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Bouncer starts a PgBouncer in front of the test server, in pool mode
// mode ("transaction" or "session") with at most poolSize server
// connections per database and user, stopped at cleanup, and returns dsn
// (a URL of the test server, Database's say) rewritten to go through it.
// Without a pgbouncer binary the test skips, except under CI=true, where
// it fails (.ci/run installs Debian's package).
func Bouncer(tb testing.TB, dsn, mode string, poolSize int) string {
	tb.Helper()
	URL(tb)
	bin := bouncerBinary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("no pgbouncer binary; CI=true requires the pooler tests (apt-get install pgbouncer)")
		}
		tb.Skip("no pgbouncer binary (Debian: apt-get install pgbouncer): skipping the pooler test")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	login := u.User.Username()
	if login == "" {
		login = "postgres"
	}
	listen := freePort(tb)
	dir, err := os.MkdirTemp("", "syncgo-pgbouncer-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	// PgBouncer refuses to run as root; started as root it drops to the
	// user named in its configuration, which must read these files.
	runAs := ""
	if os.Geteuid() == 0 {
		runAs = "postgres"
		if _, err := user.Lookup(runAs); err != nil {
			tb.Skipf("running as root and no user %q for pgbouncer to run as", runAs)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
`, host, port, listen, filepath.Join(dir, "users.txt"), mode, poolSize)
	if runAs != "" {
		ini += "user = " + runAs + "\n"
	}
	for name, body := range map[string]string{
		"users.txt":     fmt.Sprintf("%q %q\n", login, ""),
		"pgbouncer.ini": ini,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	var out binarytest.Log
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if tb.Failed() {
			tb.Logf("pgbouncer's log:\n%s", strings.TrimSpace(out.String()))
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", listen)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			tb.Fatalf("pgbouncer exited at start:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgbouncer does not listen on %s:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	u.Host = addr
	return u.String()
}

// bouncerBinary is the path of pgbouncer ("" when there is none): on the
// PATH or where Debian's package puts it.
func bouncerBinary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
