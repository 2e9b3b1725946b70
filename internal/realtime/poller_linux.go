package realtime

import (
	"sync"
	"syscall"
)

// poller waits for client bytes on idle connections without a goroutine
// per connection: one epoll instance of the hub holds every parked
// connection (edge-triggered), and a readable one gets a reader goroutine that
// reads what arrived and parks the connection again. An idle socket
// then holds no goroutine stack and no read buffer.
type poller struct {
	epfd   int
	wake   [2]int // a pipe: a byte on wake[1] ends run
	mu     sync.Mutex
	next   int32
	tokens map[int32]*session
	// fds guards the descriptors: registrations hold it shared, and
	// closing them (when run ends) exclusively, so no registration
	// reaches a closed (or reused) descriptor number.
	fds    sync.RWMutex
	closed bool
}

// pollEvents registers a connection edge-triggered: new bytes (or the
// peer's hang-up) make one event, whoever reads them. The poller reads an
// ack from a parked connection and leaves it parked with no system call
// (a one-shot registration needed an EPOLL_CTL_MOD after every ack);
// events of a connection that a reader goroutine holds are ignored, and
// parking it again re-arms it (rearm), which reports bytes that came
// meanwhile at once.
const pollEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET

// epollEvents are the events a connection is registered for: an adopted
// socket (fdConn) also reports room to write, which its writes wait for.
func (c *wsConn) epollEvents() uint32 {
	if c.fc != nil {
		return pollEvents | syscall.EPOLLOUT
	}
	return pollEvents
}

// epollET is EPOLLET as the uint32 of epoll_event (package syscall
// declares it negative).
const epollET = 1 << 31

// wakeToken marks the wake pipe's event.
const wakeToken = -1

func newPoller() *poller {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	p := &poller{epfd: epfd, tokens: map[int32]*session{}}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return nil
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: wakeToken}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil
	}
	return p
}

func (p *poller) closeFDs() {
	p.fds.Lock()
	defer p.fds.Unlock()
	p.closed = true
	_ = syscall.Close(p.epfd)
	_ = syscall.Close(p.wake[0])
	_ = syscall.Close(p.wake[1])
}

// pollBatch is how many events one EpollWait returns: a fan-out to
// every socket brings back an ack from each at about the same time.
const pollBatch = 512

// pollReadBuffer is the poller's shared read buffer (see Hub.readable).
const pollReadBuffer = 4 << 10

// hangup are the events that mean the peer is gone or the socket failed.
const hangup = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR

// run waits for readable connections and hands each to readable, with
// whether the peer hung up and a read buffer that only this goroutine
// uses, until stop.
func (p *poller) run(readable func(s *session, hup bool, buf []byte)) {
	defer p.closeFDs()
	evs := make([]syscall.EpollEvent, pollBatch)
	buf := make([]byte, pollReadBuffer)
	for {
		n, err := syscall.EpollWait(p.epfd, evs, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range evs[:n] {
			if ev.Fd == wakeToken {
				return
			}
			p.mu.Lock()
			s := p.tokens[ev.Fd]
			p.mu.Unlock()
			if s == nil {
				continue
			}
			if fc := s.conn.fc; fc != nil {
				fc.ready(ev.Events) // a read or write that waits tries again
			}
			if ev.Events&(syscall.EPOLLIN|hangup) != 0 {
				readable(s, ev.Events&hangup != 0, buf)
			}
		}
	}
}

// stop ends run; the poller is unusable afterwards.
func (p *poller) stop() {
	p.fds.RLock()
	defer p.fds.RUnlock()
	if !p.closed {
		_, _ = syscall.Write(p.wake[1], []byte{0})
	}
}

// add registers a connection, armed: the caller has marked it parked,
// or it is an adopted socket (fdConn), registered at its attach, whose
// events before it is parked only wake its waiting reads and writes.
func (p *poller) add(s *session) bool {
	p.mu.Lock()
	for {
		p.next++
		if p.next < 0 {
			p.next = 0
		}
		if _, used := p.tokens[p.next]; !used {
			break
		}
	}
	tok := p.next
	p.tokens[tok] = s
	s.conn.pollToken = tok // before the registration: its event may come at once
	p.mu.Unlock()
	var err error = syscall.EBADF
	p.fds.RLock()
	if !p.closed {
		if cerr := s.conn.rc.Control(func(fd uintptr) {
			ev := syscall.EpollEvent{Events: s.conn.epollEvents(), Fd: tok}
			err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}); cerr != nil {
			err = cerr
		}
	}
	p.fds.RUnlock()
	if err != nil {
		p.mu.Lock()
		delete(p.tokens, tok)
		p.mu.Unlock()
		return false
	}
	return true
}

// rearm waits for the connection's next bytes. Bytes already there
// (which came while a reader goroutine held the connection, their event
// ignored) are reported at once.
func (p *poller) rearm(c *wsConn) bool {
	p.fds.RLock()
	defer p.fds.RUnlock()
	if p.closed {
		return false
	}
	var err error
	if cerr := c.rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: c.epollEvents(), Fd: c.pollToken}
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
	}); cerr != nil {
		return false
	}
	return err == nil
}

// remove forgets a connection whose session is detached (its descriptor
// leaves the epoll set when it is closed).
func (p *poller) remove(c *wsConn) {
	p.mu.Lock()
	if s := p.tokens[c.pollToken]; s != nil && s.conn == c {
		delete(p.tokens, c.pollToken)
	}
	p.mu.Unlock()
}

// readNow reads what the socket holds into buf without waiting: 0 and
// EAGAIN when nothing is there, 0 and nil at the end of the stream.
func readNow(rc syscall.RawConn, buf []byte) (int, error) {
	n, err := 0, error(nil)
	if rerr := rc.Read(func(fd uintptr) bool {
		n, err = readAvailable(int(fd), buf)
		return true // never wait for the descriptor here
	}); rerr != nil {
		return 0, rerr
	}
	return n, err
}

// readAvailable reads what the descriptor holds into buf without waiting
// (readNow, and an adopted socket's fdConn.readAvailable).
func readAvailable(fd int, buf []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0), err
	}
}

// peekNow copies what the socket holds into buf without consuming it or
// waiting: 0 when nothing is there.
func peekNow(rc syscall.RawConn, buf []byte) int {
	n := 0
	_ = rc.Control(func(fd uintptr) {
		for {
			m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			if err == nil && m > 0 {
				n = m
			}
			return
		}
	})
	return n
}
