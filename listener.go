package syncgo

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// LimitListener returns a listener that accepts at most n simultaneous
// connections from l: at the cap, Accept waits until one of them closes,
// so a flood of idle connections queues in the kernel's backlog instead of
// exhausting the process's file descriptors (the store, the other
// clients' sockets). Hijacked connections (WebSockets) count until they
// close. n <= 0 returns l unchanged.
func LimitListener(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection when the underlying one can (the
// realtime channel's close handshake uses it).
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// SyscallConn exposes the underlying connection's descriptor (the wrapper
// buffers nothing): the realtime channel parks idle sockets in epoll and
// writes to them without a goroutine through it.
func (c *limitConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Unwrap returns the accepted connection (the realtime hub takes its
// descriptor over and closes it; Close still releases the slot).
func (c *limitConn) Unwrap() net.Conn { return c.Conn }
