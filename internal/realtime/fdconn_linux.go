package realtime

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// fdConn is a WebSocket's TCP socket owned by the hub: its descriptor is
// a duplicate of the accepted connection's, whose own descriptor is
// closed (adopt), so the socket is in the hub's epoll set (poller) and
// not in the Go runtime's. Every client byte then wakes one poller, not
// two: with the runtime's poller also watching, each ack of a fan-out
// woke it for nothing (no goroutine waits on a parked socket), about a
// sixth of the server's CPU in a fan-out to 1,000 sockets. Reads and
// writes that must wait (a reader goroutine's, a flusher's) wait for the
// poller's notice (ready), a deadline or Close.
type fdConn struct {
	fd   int
	orig net.Conn // the accepted connection: its Close releases what the listener holds; its addresses are the socket's
	raw  fdRaw

	// use guards the descriptor: system calls hold it shared, Close
	// exclusively, so none reaches a closed (or reused) number.
	use  sync.RWMutex
	dead bool

	mu     sync.Mutex
	rdl    time.Time     // read deadline
	wdl    time.Time     // write deadline
	rready chan struct{} // made by the first read that waits
	wready chan struct{} // made by the first write that waits
}

// unwrapper is how adopt reaches the accepted TCP connection through a
// wrapper (the server's listener wraps each connection). A wrapper that
// unwraps must hold no bytes of the stream itself: the hub reads and
// writes the socket past it.
type unwrapper interface{ Unwrap() net.Conn }

// adopt takes over nc's socket when nc is (or unwraps to) a *net.TCPConn:
// it duplicates the descriptor and closes the TCP connection's own, which
// leaves the runtime's poller; nc's Close still runs at the fdConn's
// Close. nil when nc is another kind of connection.
func adopt(nc net.Conn) *fdConn {
	inner := nc
	for {
		u, ok := inner.(unwrapper)
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	tc, ok := inner.(*net.TCPConn)
	if !ok {
		// Another kind of connection (an embedder's wrapper that does
		// not unwrap): its descriptor stays in the runtime's poller.
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) {
		fd, err = dupCloexec(int(f))
	}); cerr != nil || err != nil {
		return nil
	}
	c := &fdConn{fd: fd, orig: nc}
	c.raw.c = c
	_ = tc.Close() // the socket stays open through fd
	return c
}

// adopt makes the connection use an fdConn of nc (see adopt); false
// when nc's socket cannot be taken over.
func (c *wsConn) adopt(nc net.Conn) bool {
	fc := adopt(nc)
	if fc == nil {
		return false
	}
	c.nc, c.rc, c.fc = fc, &fc.raw, fc
	return true
}

func dupCloexec(fd int) (int, error) {
	for {
		nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
		switch errno {
		case 0:
			return int(nfd), nil
		case syscall.EINTR:
			continue
		}
		return -1, errno
	}
}

// ready is the poller's notice of events on the socket: a waiting read
// or write tries again.
func (c *fdConn) ready(events uint32) {
	c.mu.Lock()
	r, w := c.rready, c.wready
	c.mu.Unlock()
	if events&(syscall.EPOLLIN|hangup) != 0 {
		signal(r)
	}
	if events&(syscall.EPOLLOUT|hangup) != 0 {
		signal(w)
	}
}

// do runs f on the descriptor; false once the connection is closed.
func (c *fdConn) do(f func(fd int)) bool {
	c.use.RLock()
	defer c.use.RUnlock()
	if c.dead {
		return false
	}
	f(c.fd)
	return true
}

// writeAvailable is writeAvailable on the descriptor (wsConn.writeNow):
// no closure through an interface, so nothing is allocated per write.
func (c *fdConn) writeAvailable(b []byte) (n int, err error) {
	if !c.do(func(fd int) { n, err = writeAvailable(uintptr(fd), b) }) {
		return 0, net.ErrClosed
	}
	return n, err
}

// readAvailable is readNow on the descriptor (the poller's read of an
// ack), without an allocation.
func (c *fdConn) readAvailable(buf []byte) (n int, err error) {
	if !c.do(func(fd int) { n, err = readAvailable(fd, buf) }) {
		return 0, net.ErrClosed
	}
	return n, err
}

// waiter returns the channel a read (or write) waits on, made on first
// use, and its deadline. The caller tries its system call again after
// taking it: a notice that came before the channel existed is not lost.
func (c *fdConn) waiter(write bool) (chan struct{}, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if write {
		if c.wready == nil {
			c.wready = make(chan struct{}, 1)
		}
		return c.wready, c.wdl
	}
	if c.rready == nil {
		c.rready = make(chan struct{}, 1)
	}
	return c.rready, c.rdl
}

// deadline returns the read (or write) deadline.
func (c *fdConn) deadline(write bool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if write {
		return c.wdl
	}
	return c.rdl
}

// wait blocks until ch is notified or the deadline passes. Close
// notifies every waiter: its next system call finds the connection closed
// (do), so no channel per connection is kept for closing.
func (c *fdConn) wait(ch chan struct{}, dl time.Time) error {
	if dl.IsZero() {
		<-ch
		return nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// io runs one non-blocking system call until it does not report EAGAIN,
// waiting for the poller's notice in between.
func (c *fdConn) io(write bool, call func(fd int) (int, error)) (int, error) {
	var ch chan struct{}
	dl := c.deadline(write)
	for {
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := 0, error(nil)
		if !c.do(func(fd int) {
			for {
				n, err = call(fd)
				if err != syscall.EINTR {
					return
				}
			}
		}) {
			signal(ch) // Close wakes one waiter per channel: pass it on to the next
			return 0, net.ErrClosed
		}
		if err != syscall.EAGAIN {
			return n, err
		}
		if ch == nil {
			ch, dl = c.waiter(write) // and try once more before waiting
			continue
		}
		if err := c.wait(ch, dl); err != nil {
			return 0, err
		}
		ch, dl = c.waiter(write) // a deadline set meanwhile counts
	}
}

func (c *fdConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.io(false, func(fd int) (int, error) { return syscall.Read(fd, p) })
	switch {
	case err != nil:
		return 0, opError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *fdConn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := c.io(true, func(fd int) (int, error) { return syscall.Write(fd, p[written:]) })
		if n > 0 {
			written += n
		}
		if err != nil {
			return written, opError("write", err)
		}
	}
	return written, nil
}

// maxIovecs bounds the buffers of one writev (the kernel's IOV_MAX).
const maxIovecs = 1024

// writeBuffers writes bufs in order with writev, as net.Buffers does for
// the runtime's sockets (one system call for a batch of frames).
func (c *fdConn) writeBuffers(bufs [][]byte) (int, error) {
	iovs := make([]syscall.Iovec, 0, min(len(bufs), maxIovecs))
	written := 0
	for len(bufs) > 0 {
		iovs = iovs[:0]
		for _, b := range bufs {
			if len(iovs) == maxIovecs {
				break
			}
			if len(b) > 0 {
				iovs = append(iovs, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
			}
		}
		if len(iovs) == 0 {
			break
		}
		n, err := c.io(true, func(fd int) (int, error) {
			r, _, errno := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iovs[0])), uintptr(len(iovs)))
			if errno != 0 {
				return 0, errno
			}
			return int(r), nil
		})
		written += n
		for n > 0 && len(bufs) > 0 {
			if k := min(n, len(bufs[0])); k < len(bufs[0]) {
				bufs[0] = bufs[0][k:]
				n = 0
			} else {
				n -= k
				bufs = bufs[1:]
			}
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if err != nil {
			return written, opError("writev", err)
		}
	}
	return written, nil
}

// opError keeps the errors callers test with errors.Is (net.ErrClosed,
// os.ErrDeadlineExceeded) and wraps the rest as the net package does.
func opError(op string, err error) error {
	if err == net.ErrClosed || err == os.ErrDeadlineExceeded {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, err)}
}

// Close closes the descriptor (waking what waits on it) and then the
// accepted connection.
func (c *fdConn) Close() error {
	c.use.Lock()
	if c.dead {
		c.use.Unlock()
		return net.ErrClosed
	}
	c.dead = true
	err := syscall.Close(c.fd)
	c.use.Unlock()
	c.mu.Lock()
	r, w := c.rready, c.wready
	c.mu.Unlock()
	signal(r) // a waiter tries again and finds the connection closed
	signal(w)
	_ = c.orig.Close()
	if err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// CloseWrite shuts the write side (the close handshake's linger).
func (c *fdConn) CloseWrite() error {
	var err error
	if !c.do(func(fd int) { err = syscall.Shutdown(fd, syscall.SHUT_WR) }) {
		return net.ErrClosed
	}
	return err
}

func (c *fdConn) LocalAddr() net.Addr  { return c.orig.LocalAddr() }
func (c *fdConn) RemoteAddr() net.Addr { return c.orig.RemoteAddr() }

func (c *fdConn) SetDeadline(t time.Time) error {
	c.setDeadline(t, true, true)
	return nil
}

func (c *fdConn) SetReadDeadline(t time.Time) error {
	c.setDeadline(t, true, false)
	return nil
}

func (c *fdConn) SetWriteDeadline(t time.Time) error {
	c.setDeadline(t, false, true)
	return nil
}

// setDeadline sets a deadline and wakes a waiter, which takes it up.
func (c *fdConn) setDeadline(t time.Time, read, write bool) {
	c.mu.Lock()
	var r, w chan struct{}
	if read {
		c.rdl, r = t, c.rready
	}
	if write {
		c.wdl, w = t, c.wready
	}
	c.mu.Unlock()
	signal(r)
	signal(w)
}

func (c *fdConn) SyscallConn() (syscall.RawConn, error) { return &c.raw, nil }

// fdRaw is the fdConn's syscall.RawConn.
type fdRaw struct{ c *fdConn }

func (r *fdRaw) Control(f func(fd uintptr)) error {
	if !r.c.do(func(fd int) { f(uintptr(fd)) }) {
		return net.ErrClosed
	}
	return nil
}

func (r *fdRaw) Read(f func(fd uintptr) bool) error  { return r.c.rawIO(false, f) }
func (r *fdRaw) Write(f func(fd uintptr) bool) error { return r.c.rawIO(true, f) }

// rawIO calls f until it reports done, waiting for the poller's notice
// (or the deadline, or Close) after each call that is not: io's loop.
func (c *fdConn) rawIO(write bool, f func(fd uintptr) bool) error {
	_, err := c.io(write, func(fd int) (int, error) {
		if f(uintptr(fd)) {
			return 0, nil
		}
		return 0, syscall.EAGAIN
	})
	return err
}
