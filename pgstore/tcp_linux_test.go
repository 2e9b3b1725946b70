package pgstore

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
)

// The TCP settings of the URL (libpq's names) reach the sockets of the
// pool and are not sent to Postgres, which knows no such settings: an
// Open with keepalives_idle in the URL used to fail with "unrecognized
// configuration parameter". A malformed value is refused by Open.
func TestOpenURLTCPSettings(t *testing.T) {
	t.Parallel()
	name := newSchema(t)
	url := testURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	base := url + sep + "search_path=" + name
	s, err := Open(context.Background(), Config{URL: base + "&tcp_user_timeout=4000&keepalives_idle=5&keepalives_interval=2&keepalives_count=2", MaxConns: 2})
	if err != nil {
		t.Fatalf("Open with the TCP settings in the URL: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c, err := s.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	nc := c.Conn().PgConn().Conn()
	sc, ok := nc.(syscall.Conn)
	if !ok {
		if _, tcp := nc.(*net.TCPConn); !tcp {
			t.Skipf("not a TCP connection (%T)", nc)
		}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got, idle int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
		if gerr == nil {
			idle, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		}
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != 4000 || idle != 5 {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, TCP_KEEPIDLE = %d s; want 4000 and 5", got, idle)
	}

	if _, err := Open(context.Background(), Config{URL: base + "&tcp_user_timeout=soon"}); err == nil {
		t.Error("Open accepted tcp_user_timeout=soon")
	}
}
