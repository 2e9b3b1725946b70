//go:build !linux

package realtime

import (
	"net"
	"syscall"
)

// poller is Linux only (epoll): elsewhere every connection has a reader
// goroutine for its lifetime.
type poller struct{}

func newPoller() *poller                           { return nil }
func (p *poller) run(func(*session, bool, []byte)) {}
func (p *poller) stop()                            {}
func (p *poller) add(*session) bool                { return false }
func (p *poller) rearm(*wsConn) bool               { return false }
func (p *poller) remove(*wsConn)                   {}

func readNow(syscall.RawConn, []byte) (int, error) { return 0, syscall.EAGAIN }
func peekNow(syscall.RawConn, []byte) int          { return 0 }

// fdConn is Linux only (see fdconn_linux.go): elsewhere the runtime's
// poller keeps every socket.
type fdConn struct{}

func (*wsConn) adopt(net.Conn) bool                { return false }
func (*fdConn) ready(uint32)                       {}
func (*fdConn) writeBuffers([][]byte) (int, error) { return 0, net.ErrClosed }
func (*fdConn) writeAvailable([]byte) (int, error) { return 0, net.ErrClosed }
func (*fdConn) readAvailable([]byte) (int, error)  { return 0, net.ErrClosed }
