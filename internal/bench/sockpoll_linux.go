package bench

import (
	"io"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// sockPoller reads the realtime connections of virtual sockets from an
// epoll set of its own, on one goroutine, instead of a goroutine per
// socket parked in Go's netpoller. It reads every ready socket's bytes
// first, every read stamped as it returns (the tool's receive time, and
// the kernel's), and decodes, applies and acks what it read only while no
// socket is ready, a few reads at a time between looks: with a goroutine
// per socket, the last of 1,000 sockets made readable by one fan-out was
// read only after the 999 others had been decoded, applied and acked, and
// with a whole round of reads handled before the next look, after the
// round's; either way the tool's own apply-and-ack work sat inside the
// spread it reports. Every delta is still decoded, validated,
// applied and acked after it is applied, one ack per delta, as the
// Syncular client does; wake-ups and recoveries run as before (a recovery
// on a goroutine of its own).
type sockPoller struct {
	epfd  int
	wake  [2]int // a byte on wake[1] ends run
	arena int    // the arena's first size

	mu    sync.Mutex
	socks map[int32]*vsocket
	next  int32
	ended chan struct{}
}

// pollerBatch is how many ready sockets one epoll wait returns;
// pollerArena the first size of the arena the reads go to (readArena),
// pollerArenaMax the largest it grows to.
const (
	pollerBatch    = 256
	pollerArena    = 1 << 20
	pollerArenaMax = 32 << 20
	// pollerHandle is how many reads are handled between two looks for
	// more; pollerQueue the fewest reads that holdLimit allows.
	pollerHandle = 16
	pollerQueue  = 4 * pollerBatch
)

// newSockPoller starts a poller whose reads go to an arena of arena
// bytes at first (pollerArena when 0 or less).
func newSockPoller(arena int) (*sockPoller, error) {
	if arena <= 0 {
		arena = pollerArena
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &sockPoller{epfd: epfd, arena: arena, socks: map[int32]*vsocket{}, ended: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: -1}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil, err
	}
	go p.run()
	return p, nil
}

func (p *sockPoller) closeFDs() {
	_ = syscall.Close(p.epfd)
	_ = syscall.Close(p.wake[0])
	_ = syscall.Close(p.wake[1])
}

// stop ends run and waits for it.
func (p *sockPoller) stop() {
	_, _ = syscall.Write(p.wake[1], []byte{0})
	<-p.ended
}

// add hands a connected socket's reading to the poller; false when it
// cannot (no stamped TCP connection, or bytes already read past the
// hello): the caller reads it with a goroutine.
func (p *sockPoller) add(s *vsocket) bool {
	c := s.rx.conn.Load()
	if c == nil || s.rt.Buffered() > 0 {
		return false
	}
	p.mu.Lock()
	p.next++
	tok := p.next
	p.socks[tok] = s
	s.polled = true // before the registration: its first event may come at once
	p.mu.Unlock()
	var err error = syscall.EBADF
	if cerr := c.rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: tok}
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	}); cerr != nil {
		err = cerr
	}
	if err != nil {
		p.mu.Lock()
		delete(p.socks, tok)
		s.polled = false
		p.mu.Unlock()
		return false
	}
	return true
}

// remove forgets a socket (its connection is closed, which also takes
// its descriptor out of the epoll set).
func (p *sockPoller) remove(tok int32) {
	p.mu.Lock()
	delete(p.socks, tok)
	p.mu.Unlock()
}

type polledRead struct {
	tok    int32
	s      *vsocket
	b      []byte
	at, rx time.Time
	end    string // why the connection ended, "" for bytes read
}

// holdLimit is the most reads held before they are all handled: one per
// socket of the poller and a batch more, at least pollerQueue, so that a
// fan-out's deltas to every socket are read before any is handled.
func (p *sockPoller) holdLimit() int {
	p.mu.Lock()
	n := len(p.socks)
	p.mu.Unlock()
	return max(pollerQueue, n+pollerBatch)
}

func (p *sockPoller) run() {
	defer close(p.ended)
	defer p.closeFDs()
	evs := make([]syscall.EpollEvent, pollerBatch)
	arena := newReadArena(p.arena, pollerArenaMax)
	var oob [64]byte
	reads := make([]polledRead, 0, pollerBatch)
	// handle decodes, applies and acks up to max of what was read, in
	// the order read.
	handle := func(max int) {
		k := min(max, len(reads))
		for _, r := range reads[:k] {
			select {
			case <-r.s.done:
				continue // ended by an earlier read of the round
			default:
			}
			if r.end != "" {
				r.s.endWhy = r.end
			}
			if r.end != "" || !r.s.consume(r.b, r.at, r.rx) {
				p.remove(r.tok)
				r.s.endPolled()
			}
		}
		reads = reads[:copy(reads, reads[k:])]
		if len(reads) == 0 {
			arena.reset()
		}
	}
	for {
		// With reads in hand, only look whether more are ready: what
		// was read is handled a few at a time between looks, so a
		// fan-out's deltas are read, and stamped, before the tool
		// spends its CPU on applying and acking them.
		timeout := -1
		if len(reads) > 0 {
			timeout = 0
		}
		n, err := syscall.EpollWait(p.epfd, evs, timeout)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		if n == 0 {
			handle(pollerHandle)
			continue
		}
		full, limit := false, p.holdLimit()
		for _, ev := range evs[:n] {
			if ev.Fd == -1 {
				return
			}
			p.mu.Lock()
			s := p.socks[ev.Fd]
			p.mu.Unlock()
			if s == nil {
				continue
			}
			buf, ok := arena.room(len(reads) < limit)
			if !ok {
				full = true // the rest are ready again in the next round
				break
			}
			m, rx, err := s.readRaw(buf, oob[:])
			at := time.Now()
			switch {
			case err == syscall.EAGAIN:
				continue
			case err != nil || m == 0:
				if err == nil {
					err = io.EOF
				}
				reads = append(reads, polledRead{tok: ev.Fd, s: s, end: "read: " + err.Error()})
				// An ended socket stays readable (the set is
				// level-triggered) until it is handled and closed: the
				// reads are handled now, not after the next looks.
				full = true
				continue
			}
			arena.used(m)
			reads = append(reads, polledRead{tok: ev.Fd, s: s, b: buf[:m], at: at, rx: rx})
		}
		if full || len(reads) >= limit {
			handle(len(reads))
		}
	}
}

// readRaw reads what the socket holds without waiting, with the kernel's
// receive time of the last segment read (SO_TIMESTAMPNS).
func (s *vsocket) readRaw(buf, oob []byte) (n int, rx time.Time, err error) {
	c := s.rx.conn.Load()
	var oobn int
	if rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = syscall.Recvmsg(int(fd), buf, oob, syscall.MSG_DONTWAIT)
			if err != syscall.EINTR {
				return true // never wait here
			}
		}
	}); rerr != nil {
		return 0, time.Time{}, rerr
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_TIMESTAMPNS &&
				len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				rx = time.Unix(0, ts.Nano())
			}
		}
	}
	return n, rx, nil
}
