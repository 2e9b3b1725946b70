package syncgo_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/pgstore"
)

// freezeProxy forwards TCP connections to a target until freeze: then it
// stops reading and writing on every connection, closing none. It
// listens on TCP and forwards to a unix socket.
type freezeProxy struct {
	ln     net.Listener
	target string // a unix socket's path

	mu     sync.Mutex
	frozen chan struct{} // closed while forwarding; replaced by freeze
	conns  []net.Conn
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	close(open)
	p := &freezeProxy{ln: ln, target: target, frozen: open}
	t.Cleanup(func() {
		_ = ln.Close()
		p.thaw()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

// gate waits while the proxy is frozen.
func (p *freezeProxy) gate() {
	p.mu.Lock()
	ch := p.frozen
	p.mu.Unlock()
	<-ch
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		p.gate()
		n, err := src.Read(buf)
		p.gate()
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

// freeze stops forwarding on every connection, new or open.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = make(chan struct{})
}

// thaw forwards again.
func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}

// dropPort makes the kernel drop every packet sent from a TCP port of the
// loopback device (the acknowledgements and answers of the proxy that
// listens on it), without a reset or a FIN: to the client, the network
// between it and Postgres going silent under an established connection.
// (Dropping the client's own packets would not do: a packet a local
// queue drops is reported to the sender's TCP, unlike one lost on the
// way.) The
// test runs in a network namespace of its own (netnsChild), whose
// loopback device nobody else uses.
func dropPort(t *testing.T, port int) (restore func()) {
	t.Helper()
	restore = func() { _ = exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run() }
	t.Cleanup(restore)
	p := strconv.Itoa(port)
	for _, args := range [][]string{
		{"qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"},
		{"class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb", "rate", "10gbit"},
		{"qdisc", "add", "dev", "lo", "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"},
		{"filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "sport", p, "0xffff", "flowid", "1:2"},
	} {
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v: %v: %s", args, err, out)
		}
	}
	return restore
}

// netnsChild runs the calling test again in a network namespace of its
// own (unshare -n), where it may change the loopback device, reaching
// Postgres through its unix socket; it reports whether this is that run.
// The outer run skips unless SYNCGO_TEST_NETNS is set, as root, with
// unshare, ip and tc, and Postgres's socket in /var/run/postgresql.
func netnsChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv("SYNCGO_NETNS_CHILD") != "" {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v: %s", err, out)
		}
		return true
	}
	if os.Getenv("SYNCGO_TEST_NETNS") == "" || os.Geteuid() != 0 {
		t.Skip("needs root, unshare, ip, tc and SYNCGO_TEST_NETNS=1 (runs in a network namespace of its own)")
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "SYNCGO_NETNS_CHILD=1",
		"SYNCGO_TEST_POSTGRES_URL=postgres://postgres@/syncgo_test?host=/var/run/postgresql&sslmode=disable")
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the run in a network namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatal("the run in a network namespace did not pass")
	}
	return false
}

// A Postgres connection that goes silent in the middle of a request (no
// reset, no FIN; what the server sends is no longer acknowledged) must
// not hold the request until TCP gives up, which it never does while the
// other side's kernel answers its zero-window probes and takes up to
// about 15 minutes of retransmissions when the packets are dropped: a
// push is answered with an error within the connection's TCP user timeout
// (here 3 s, from the URL) and the connect timeout of its replacement.
func TestPostgresFrozenConnectionAnswered(t *testing.T) {
	if !netnsChild(t) {
		return
	}
	db := pgtest.Schema(t, "syncgo_frozen", false)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	proxy := newFreezeProxy(t, q.Get("host")+"/.s.PGSQL.5432")
	u.Host = proxy.addr()
	q.Del("host")
	q.Set("tcp_user_timeout", "3000")
	q.Set("connect_timeout", "3")
	u.RawQuery = q.Encode()
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: u.String(), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := &rtEnv{t: t, store: st, schema: rtSchema(t), gates: map[string]chan struct{}{}}
	e.start(syncgo.Config{Store: st, Schema: e.schema, Authenticate: rtAuth, ResolveScopes: e.resolve, RetentionInterval: -1,
		OnError: func(err error, route string) { t.Logf("%s: %v", route, err) }})
	writer := e.peer("alice", "w1")
	writer.push("before", rtTask{"t0", "p1", "before", ""})

	_, portText, err := net.SplitHostPort(proxy.addr())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	restore := dropPort(t, port)
	e.pushFailsWithin(writer, 40*time.Second, "the connection to Postgres was silent", func() {
		restore() // lets the request end
		proxy.thaw()
	})
}
