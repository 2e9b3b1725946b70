//go:build !linux

package realtime

// poller is Linux only (epoll): elsewhere every connection has a reader
// goroutine for its lifetime.
type poller struct{}

func newPoller() *poller             { return nil }
func (p *poller) run(func(*session)) {}
func (p *poller) stop()              {}
func (p *poller) add(*session) bool  { return false }
func (p *poller) rearm(*wsConn) bool { return false }
func (p *poller) remove(*wsConn)     {}
