package bench

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rxClock holds the kernel's receive time of the last bytes a virtual
// socket read (SO_TIMESTAMPNS): when the delta reached the client's
// machine, whatever the tool's own goroutines were doing then. A
// fan-out's spread measured by it leaves out the tool's scheduling of
// its reading goroutines on the CPUs it shares with the server.
type rxClock struct {
	conn atomic.Pointer[stampedConn]
}

// dial opens a TCP connection whose reads record their receive time.
func (k *rxClock) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc, nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nc, nil // no stamps: last reports none
	}
	c := &stampedConn{TCPConn: tc, rc: rc}
	k.conn.Store(c)
	return c, nil
}

// last is the receive time of the bytes last read, and false when the
// connection records none.
func (k *rxClock) last() (time.Time, bool) {
	c := k.conn.Load()
	if c == nil {
		return time.Time{}, false
	}
	ns := c.stamp.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// stampedConn reads with recvmsg, keeping the receive time the kernel
// reports for the last segment each read consumed.
type stampedConn struct {
	*net.TCPConn
	rc    syscall.RawConn
	oob   [128]byte
	stamp atomic.Int64 // Unix nanoseconds
}

func (c *stampedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var err error
	if rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = syscall.Recvmsg(int(fd), p, c.oob[:], 0)
			if err != syscall.EINTR {
				return err != syscall.EAGAIN
			}
		}
	}); rerr != nil {
		return 0, rerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	if msgs, perr := syscall.ParseSocketControlMessage(c.oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_TIMESTAMPNS &&
				len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				c.stamp.Store(ts.Nano())
			}
		}
	}
	return n, nil
}
